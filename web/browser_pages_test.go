package web

import (
	"context"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/reconcile"
)

// TestBrowserPagesFitAndKeys loads every main page (an operation of each kind among them: a
// question waiting, a failed one with a long reason, a handoff, a synchronous call) at 1280 and
// at 390 px and checks that none is wider than the screen, saving a screenshot of each; then "/"
// focuses the search box and j moves the focus along the rows of a list.
func TestBrowserPagesFitAndKeys(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newOpsEnv(t)
	// A failed operation whose tool answered with a long text holding an unbroken token (the
	// page that was 636 px wide at 390), a handoff and a synchronous call, run to their end
	// before the watcher stops.
	failed := e.start(t, "acme", "refund", "fit-3", `{"duration_ms": 10, "outcome": "tool_error", "text": "declined by the system of record: ref `+
		strings.Repeat("9f86d081884c7d659a2feaa0c55ad015", 6)+` while checking the account of the customer A-fit-3 against the ledger"}`)
	handoff := e.start(t, "acme", "kyc", "fit-4", `{}`)
	sync := e.start(t, "acme", "lookup", "fit-5", `{}`)
	w, passes := e.b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 20*time.Second, "the failed operation's reason", func() bool { return e.b.Detail(t, failed).FailureReason != "" })
	w.Stop() // from here no poll moves a task on: the question seeded below stays open
	id := e.start(t, "acme", "refund", "fit-1", `{"outcome": "hang"}`)
	e.start(t, "acme", "refund", "fit-2", `{"outcome": "hang"}`)
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO pending_inputs (operation_id, input_key, method, message, fields)
		VALUES ($1, 'q', 'elicitation/create', 'Approve the refund of A-fit-1 to the original card, a rather long question?', '[{"name":"approve","type":"boolean","required":true}]')`, id); err != nil {
		t.Fatal(err)
	}
	// The first operation waits for its answer, so its page shows the question to answer.
	if _, err := e.pool.Exec(context.Background(), `UPDATE tasks SET state = 'input_required' WHERE operation_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	item := e.openItem(t, "acme", "fit-item", reconcile.ReasonSyncTimeout)
	// A bulk action, for its batch page: claim the one sync_timeout item.
	res, body := e.do(t, "support", "POST", "/reconcile/bulk", url.Values{"tenant": {"acme"}, "reason": {string(reconcile.ReasonSyncTimeout)},
		"action": {"claim"}, "confirm": {reconcile.ConfirmPhrase("claim", 1)}})
	batch := regexp.MustCompile(`data-batch="([^"]+)"`).FindStringSubmatch(body)
	if res.StatusCode != 200 || batch == nil {
		t.Fatalf("bulk claim: %d", res.StatusCode)
	}
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 240*time.Second)
	defer cancelT()
	u := e.users["admin"]
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=who-name]`))); err != nil {
		t.Fatal(err)
	}
	pages := map[string]string{"overview": "/", "inbox": "/inbox", "operations": "/operations", "operation": "/operations/" + id,
		"reconcile": "/reconcile", "reconcile-item": "/reconcile/" + item, "audit": "/audit", "audit-operation": "/audit?operation=" + id,
		"servers": "/servers", "workflows": "/workflows", "accounts": "/admin/accounts", "tokens": "/admin/tokens", "gates": "/gates",
		"operation-failed": "/operations/" + failed, "operation-handoff": "/operations/" + handoff, "operation-sync": "/operations/" + sync,
		"reconcile-batch": "/reconcile/batches/" + batch[1], "password": passwordPath, "not-found": "/no/such/page"}
	for _, width := range []int64{1280, 390} {
		if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 860)); err != nil {
			t.Fatal(err)
		}
		for name, path := range pages {
			if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+path), chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`))); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			// Nothing is wider than the screen: neither the window nor the space beside a
			// scroll bar.
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
			if name == "reconcile" && width == 1280 {
				// The queue's filters, the operations list's in the same order, sit in one row.
				rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`new Set(Array.from(document.querySelectorAll('[data-testid=reconcile-filters] > div'))
					.map(d => Math.round(d.getBoundingClientRect().bottom))).size`))
				if err != nil || rows != 1 {
					t.Errorf("the queue's filters take %d rows at 1280 px (%v)", rows, err)
				}
			}
			screenshot(t, ctx, fmt.Sprintf("page-%s-%d", name, width))
		}
	}
	// At 390 px: the operations list is stacked rows with the work, the states and the age in
	// view; the operation page puts the question and the cancel control on the first screen,
	// with no answer chosen.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(e.URL+"/operations"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=op-row]`))); err != nil {
		t.Fatal(err)
	}
	stacked, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const row = document.querySelector('[data-testid=op-row]');
		const cw = document.documentElement.clientWidth;
		const out = [];
		for (const sel of ['td[data-label=Work]', '[data-testid=task-state]', '[data-testid=domain-outcome]', '[data-testid=started]', '[data-testid=elapsed]']) {
			const c = row.querySelector(sel);
			if (!c) { out.push(sel + ' missing'); continue; }
			const r = c.getBoundingClientRect();
			if (getComputedStyle(c).display !== 'block') out.push(sel + ' not stacked');
			if (r.height === 0 || r.right > cw || r.left < 0) out.push(sel + ' not in view');
		}
		return out.join('; ');
	})()`))
	if err != nil || stacked != "" {
		t.Errorf("operations list at 390 px: %s %v", stacked, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/operations/"+id), chromedp.WaitVisible(chromedp.CSS(`[data-testid=input-form]`))); err != nil {
		t.Fatal(err)
	}
	top, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const q = document.querySelector('[data-testid=input-open]').getBoundingClientRect();
		const c = document.querySelector('[data-testid=cancel-open]').getBoundingClientRect();
		const f = document.querySelector('[data-testid=op-facts]').getBoundingClientRect();
		return [q.top < innerHeight && q.top < f.top, c.top < innerHeight && c.top < f.top, document.querySelector('[data-testid=input-bool]').value].join(' ');
	})()`))
	if err != nil || top != "true true " {
		t.Errorf("operation page at 390 px: question on the first screen, cancel on the first screen, answer chosen = %q (%v)", top, err)
	}
	screenshot(t, ctx, "operation-question-390")

	// Hovering a time or a chart's bar adds the reader's own time beside UTC.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860), chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=chart]`))); err != nil {
		t.Fatal(err)
	}
	hover, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const bar = document.querySelector('[data-testid=chart-bar]');
		bar.querySelector('rect').dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
		const tm = document.querySelector('time[datetime]');
		tm.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
		return bar.querySelector('title').textContent + ' | ' + tm.title;
	})()`))
	if err != nil || strings.Count(hover, "UTC") < 2 || strings.Count(hover, "your time") != 2 {
		t.Errorf("hover titles %q (%v), want UTC and your time in both", hover, err)
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
	// k moves back; Enter opens the row under the focus.
	if err := chromedp.Do(ctx, chromedp.KeyEvent("k")); err != nil {
		t.Fatal(err)
	}
	first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const links = Array.from(document.querySelectorAll("[data-testid=op-row] [data-testid=op-link]"));
		return links.indexOf(document.activeElement) === 0 ? new URL(links[0].href).pathname : "";
	})()`))
	if err != nil || first == "" {
		t.Fatalf("after k the focus is not on the first row (%v)", err)
	}
	if err := chromedp.Do(ctx, chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=op-facts]`))); err != nil {
		t.Fatal(err)
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.pathname`)); err != nil || got != first {
		t.Errorf("Enter opened %q, want %q (%v)", got, first, err)
	}
	// "/" focuses the search on every page, and j walks the queue's and the inbox's rows too.
	for _, path := range []string{"/", "/inbox", "/reconcile", "/servers", "/audit", "/workflows", "/operations/" + id} {
		if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+path), chromedp.WaitVisible(chromedp.CSS(`[data-testid=page-title]`)), chromedp.KeyEvent("/")); err != nil {
			t.Fatal(err)
		}
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.id`)); err != nil || got != "site-search" {
			t.Errorf("%s: after / the focus is on %q (%v)", path, got, err)
		}
		if path != "/reconcile" && path != "/inbox" {
			continue
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.activeElement.blur(), true`)); err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.KeyEvent("j")); err != nil {
			t.Fatal(err)
		}
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.activeElement.dataset.testid || ""`)); err != nil || (got != "item-link" && got != "inbox-op") {
			t.Errorf("%s: after j the focus is on %q (%v)", path, got, err)
		}
	}
}

// checkHeader holds the header to its rule at each width: at 390 px one row with the menu and
// without the wide navigation; at 1280 px the navigation and no menu.
func checkHeader(t *testing.T, ctx context.Context, path string, width int64) {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`(() => {
		const bar = document.querySelector('[data-testid=topbar]');
		const menu = document.querySelector('[data-testid=menu-open]');
		const nav = document.querySelector('.wide-nav');
		const seen = el => el !== null && el.getBoundingClientRect().height > 0;
		const tops = Array.from(bar.children).filter(seen).map(el => Math.round(el.getBoundingClientRect().top + el.getBoundingClientRect().height / 2));
		const oneRow = tops.every(y => Math.abs(y - tops[0]) <= 6) && bar.getBoundingClientRect().height <= 56;
		const inView = Array.from(bar.children).filter(seen).every(el => el.getBoundingClientRect().right <= document.documentElement.clientWidth);
		return [oneRow, inView, seen(menu), seen(nav)].join(' ');
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	want := "true true false true"
	if width <= 720 {
		want = "true true true false"
	}
	if width > 720 {
		// A wide screen may wrap the navigation; only the menu and the navigation are checked.
		got, want = got[strings.Index(got, " ")+1:], want[strings.Index(want, " ")+1:]
	}
	if got != want {
		t.Errorf("%s at %d px: header one row, in view, menu shown, navigation shown = %q, want %q", path, width, got, want)
	}
}
