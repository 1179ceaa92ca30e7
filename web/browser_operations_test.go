package web

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/audit"
)

// TestBrowserOperations signs in as an operator, opens the overview, the operations list and an
// operation, cancels its running task through the confirmation and saves screenshots at 1280 px
// and on a narrow screen.
func TestBrowserOperations(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newOpsEnv(t)
	lctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	<-audit.Listen(lctx, e.pool, nil, e.srv.Publish)
	id := e.start(t, "acme", "refund", "1042", `{"outcome": "hang"}`)
	e.start(t, "globex", "report", "2001", `{"duration_ms": 10}`)
	e.start(t, "acme", "closure", "3001", `{}`)
	e.b.Watcher(t, "r1", nil)

	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	u := e.users["operator"]
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email),
		chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=matrix]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=chart]`)),
	); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, `[data-testid=tile-inflight] .value`); got == "0" {
		t.Errorf("in-flight tile shows %q", got)
	}
	screenshot(t, ctx, "ops-overview")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=nav-operations]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=operations]`))); err != nil {
		t.Fatal(err)
	}
	if !present(t, ctx, `[data-testid=op-row][data-id="`+id+`"]`) || !present(t, ctx, `[data-testid=export-csv]`) {
		t.Error("the list misses the operation or the export")
	}
	screenshot(t, ctx, "ops-list")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=op-row][data-id="`+id+`"] [data-testid=op-link]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=timeline]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=cancel-open]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=cancel-reason]`)),
	); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "ops-cancel-confirm")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`[data-testid=cancel-reason]`), "customer withdrew"),
		chromedp.Click(chromedp.CSS(`[data-testid=cancel-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=cancel-steps]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	); err != nil {
		t.Fatal(err)
	}
	if d := e.b.Detail(t, id); d.Task.CancelRequested == nil || d.Task.CancelBy != u.Account.Email {
		t.Fatalf("cancel not recorded: %+v", d.Task)
	}
	found := false
	for _, r := range e.auditRows(t) {
		found = found || r.Action == "operation.cancel" && r.Target == "operation:"+id && r.Actor == u.Account.Email
	}
	if !found {
		t.Error("no audit row for the cancel")
	}
	screenshot(t, ctx, "ops-detail-cancelled")

	// Narrow screen.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(390, 844), chromedp.Navigate(e.URL+"/operations/"+id),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=timeline]`))); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "ops-detail-narrow")
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=matrix]`))); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "ops-overview-narrow")
}
