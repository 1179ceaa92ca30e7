package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
)

// TestBrowserEightTabsLoadAndUpdate opens eight tabs of one signed-in browser at once: every tab
// loads (a stream per tab would exhaust the six connections a browser allows per host), one
// stream serves them all, and a change made elsewhere reaches every tab.
func TestBrowserEightTabsLoadAndUpdate(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	lctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	<-audit.Listen(lctx, e.pool, nil, e.srv.Publish)

	first, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	u := e.users["operator"]
	start := time.Now()
	signCtx, cancelS := context.WithTimeout(first, 60*time.Second)
	defer cancelS()
	if err := chromedp.Do(signCtx, chromedp.Navigate(e.URL+"/audit"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`)),
		chromedp.Navigate(e.URL+"/audit"), chromedp.WaitVisible(chromedp.CSS(`body[data-live-state=stream]`))); err != nil {
		t.Fatal(err)
	}
	tabs := []context.Context{first}
	for i := 1; i < 8; i++ {
		tab, cancel := chromedp.NewContext(first) // a new tab in the same browser context: same cookies
		defer cancel()
		// Open the tab on its own context, so a timeout on one action does not close it.
		if err := chromedp.Do(tab, chromedp.Navigate("about:blank")); err != nil {
			t.Fatal(err)
		}
		tabs = append(tabs, tab)
	}
	// Open the other seven at once, each waiting for the page and the live status.
	errs := make(chan error, len(tabs)-1)
	for i, tab := range tabs[1:] {
		go func() {
			ctx, cancel := context.WithTimeout(tab, 30*time.Second)
			defer cancel()
			err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/audit"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=audit-row]`)),
				chromedp.WaitVisible(chromedp.CSS(`body[data-live-state=stream]`)))
			if err != nil {
				err = fmt.Errorf("tab %d: %w", i+2, err)
			}
			errs <- err
		}()
	}
	for range tabs[1:] {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("eight tabs loaded and live after %s", time.Since(start).Round(time.Millisecond))
	for i, tab := range tabs {
		ctx, cancel := context.WithTimeout(tab, 10*time.Second)
		err := chromedp.Do(ctx, chromedp.WaitReady(chromedp.CSS(`body[data-live-shared=true]`)))
		cancel()
		if err != nil {
			t.Fatalf("tab %d does not share the stream: %v", i+1, err)
		}
	}
	screenshot(t, tabs[7], "eight-tabs-8th")
	if _, _, err := e.auth.CreateToken(context.Background(), audit.Actor{Name: "elsewhere", Kind: audit.KindCLI}, auth.AllTenants,
		"eight-tabs", auth.TenantScope("acme")); err != nil {
		t.Fatal(err)
	}
	for i, tab := range tabs {
		ctx, cancel := context.WithTimeout(tab, 20*time.Second)
		err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`[data-testid=live-new-show]`)), chromedp.Click(chromedp.CSS(`[data-testid=live-new-show]`)),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-action="token.create"]`)))
		cancel()
		if err != nil {
			t.Fatalf("tab %d did not update: %v", i+1, err)
		}
	}
}
