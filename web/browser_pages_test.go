package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserPagesFitAndKeys loads every main page at 1280 and at 390 px and checks that none is
// wider than the screen, saving a screenshot of each; then "/" focuses the search box and j
// moves the focus along the rows of a list.
func TestBrowserPagesFitAndKeys(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "fit-1", `{"outcome": "hang"}`)
	e.start(t, "acme", "refund", "fit-2", `{"outcome": "hang"}`)
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO pending_inputs (operation_id, input_key, method, message, fields)
		VALUES ($1, 'q', 'elicitation/create', 'Approve the refund of A-fit-1 to the original card, a rather long question?', '[{"name":"approve","type":"boolean","required":true}]')`, id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 120*time.Second)
	defer cancelT()
	u := e.users["admin"]
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`))); err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{"overview": "/", "inbox": "/inbox", "operations": "/operations", "operation": "/operations/" + id,
		"reconcile": "/reconcile", "audit": "/audit", "servers": "/servers", "workflows": "/workflows", "accounts": "/admin/accounts"}
	for _, width := range []int64{1280, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 860)); err != nil {
			t.Fatal(err)
		}
		for name, path := range pages {
			if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+path), chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`))); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			fit, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.scrollWidth + " " + window.innerWidth`))
			if err != nil {
				t.Fatal(err)
			}
			var sw, iw int
			fmt.Sscan(fit, &sw, &iw)
			if sw > iw {
				t.Errorf("%s at %d px is %d px wide", path, width, sw)
			}
			screenshot(t, ctx, fmt.Sprintf("page-%s-%d", name, width))
		}
	}
	// Keys: "/" focuses the search from any page; j moves along the rows.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860), chromedp.Navigate(e.URL+"/operations"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=op-row]`)), chromedp.KeyEvent("/")); err != nil {
		t.Fatal(err)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.id`)); err != nil || got != "site-search" {
		t.Fatalf("after / the focus is on %q (%v)", got, err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.activeElement.blur(), true`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.KeyEvent("j"), chromedp.KeyEvent("j")); err != nil {
		t.Fatal(err)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll("[data-testid=op-row] [data-testid=op-link]")).indexOf(document.activeElement)`)); err != nil || got != 1 {
		t.Fatalf("after j j the focus is on row %d (%v)", got, err)
	}
}
