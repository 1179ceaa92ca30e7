package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/audit"
)

// TestBrowserControlPagesFit loads the sign-in page and then the flags, kill switch, rollouts,
// gates, gate run and manifest history pages at 1280 and 390 px: none is wider than the screen,
// the header keeps to its rule, and an engaged switch offers its release only behind a
// confirmation that says what will change.
func TestBrowserControlPagesFit(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	withRollouts(t, e)
	if err := e.flags.Engage(context.Background(), audit.Actor{Name: "oncall@test", Kind: audit.KindAccount}, "workflow", "refund", "refunds double-charging"); err != nil {
		t.Fatal(err)
	}
	run := storeGateRun(t, e, "the server answered another identity's tasks/get")
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 120*time.Second)
	defer cancelT()
	for _, width := range []int64{1280, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 860), chromedp.Navigate(e.URL+"/signin"),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`))); err != nil {
			t.Fatal(err)
		}
		fitsScreen(t, ctx, "/signin", width)
		checkSignedOutHeader(t, ctx, width)
		screenshot(t, ctx, fmt.Sprintf("page-signin-%d", width))
	}
	u := e.users["operator"]
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860), chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`))); err != nil {
		t.Fatal(err)
	}
	pages := []struct{ name, path string }{{"flags", "/flags"}, {"killswitch", "/killswitch"}, {"rollouts", "/rollouts"},
		{"gates", "/gates"}, {"gate-run", "/gates/" + i64(run)}, {"manifests", "/servers/demo/manifests"}}
	for _, width := range []int64{1280, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 860)); err != nil {
			t.Fatal(err)
		}
		for _, p := range pages {
			name, path := p.name, p.path
			if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+path), chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`))); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			switch name {
			case "gate-run":
				if !present(t, ctx, `[data-testid=case-security-cross-identity-get]`) {
					t.Errorf("the gate run page at %d px shows no case", width)
				}
			case "manifests":
				if !present(t, ctx, `[data-testid=version-1]`) {
					t.Errorf("the manifest history at %d px shows no version", width)
				}
			}
			fitsScreen(t, ctx, path, width)
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

// fitsScreen fails the test when the page is wider than the window or the space beside its
// scroll bar.
func fitsScreen(t *testing.T, ctx context.Context, path string, width int64) {
	t.Helper()
	fit, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.scrollWidth + " " + window.innerWidth + " " + document.documentElement.clientWidth`))
	if err != nil {
		t.Fatal(err)
	}
	var sw, iw, cw int
	fmt.Sscan(fit, &sw, &iw, &cw)
	if sw > iw || sw > cw {
		t.Errorf("%s at %d px is %d px wide (window %d, beside the scroll bar %d)", path, width, sw, iw, cw)
	}
}

// checkSignedOutHeader holds the sign-in page's header to its rule: one row in view, with the
// brand and neither the search nor any section link (nothing is offered before signing in).
func checkSignedOutHeader(t *testing.T, ctx context.Context, width int64) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const bar = document.querySelector('[data-testid=topbar]');
		if (!bar) return 'no header';
		const seen = el => el !== null && el.getBoundingClientRect().height > 0;
		const kids = Array.from(bar.children).filter(seen);
		const tops = kids.map(el => Math.round(el.getBoundingClientRect().top + el.getBoundingClientRect().height / 2));
		const oneRow = tops.every(y => Math.abs(y - tops[0]) <= 6) && bar.getBoundingClientRect().height <= 56;
		const inView = kids.every(el => el.getBoundingClientRect().right <= document.documentElement.clientWidth && el.getBoundingClientRect().left >= 0);
		return [oneRow, inView, seen(bar.querySelector('.brand')), seen(document.querySelector('#site-search')), bar.querySelectorAll('[data-testid^=nav-]').length].join(' ');
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if got != "true true true false 0" {
		t.Errorf("/signin at %d px: header one row, in view, brand shown, search shown, section links = %q, want %q", width, got, "true true true false 0")
	}
}
