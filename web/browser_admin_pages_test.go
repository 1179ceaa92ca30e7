package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/audit"
)

// TestBrowserControlPagesFit loads the flags, kill switch, rollouts and gates pages at 1280 and
// 390 px: none is wider than the screen, the header keeps to its rule, and an engaged switch
// offers its release only behind a confirmation that says what will change.
func TestBrowserControlPagesFit(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	withRollouts(t, e)
	if err := e.flags.Engage(context.Background(), audit.Actor{Name: "oncall@test", Kind: audit.KindAccount}, "workflow", "refund", "refunds double-charging"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 120*time.Second)
	defer cancelT()
	u := e.users["operator"]
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`))); err != nil {
		t.Fatal(err)
	}
	pages := []string{"flags", "killswitch", "rollouts", "gates"}
	for _, width := range []int64{1280, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 860)); err != nil {
			t.Fatal(err)
		}
		for _, name := range pages {
			path := "/" + name
			if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+path), chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`))); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			fit, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.scrollWidth + " " + window.innerWidth + " " + document.documentElement.clientWidth`))
			if err != nil {
				t.Fatal(err)
			}
			var sw, iw, cw int
			fmt.Sscan(fit, &sw, &iw, &cw)
			if sw > iw || sw > cw {
				t.Errorf("%s at %d px is %d px wide (window %d, beside the scroll bar %d)", path, width, sw, iw, cw)
			}
			checkHeader(t, ctx, path, width)
			if name == "killswitch" {
				row := `tr[data-testid="switch-kill-switch:workflow:refund"]`
				if present(t, ctx, row+` [data-testid=release-form]:not(details [data-testid=release-form])`) || !present(t, ctx, row+` details[data-testid=release-confirm] [data-testid=release-form]`) {
					t.Errorf("at %d px the release is not behind its confirmation", width)
				}
			}
			screenshot(t, ctx, fmt.Sprintf("page-%s-%d", name, width))
		}
	}
}
