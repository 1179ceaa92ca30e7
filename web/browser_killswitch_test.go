package web

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserKillSwitchEngageRelease engages a workflow's kill switch through the console in
// Chromium (form, confirmation with the drain, engage), screenshots the drain gauge of a
// running Task, then releases it with a reason.
func TestBrowserKillSwitchEngageRelease(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)
	// One refund Task running, so the gauge has something to drain.
	ctxDB := context.Background()
	var opID string
	if err := e.pool.QueryRow(ctxDB, `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason)
		VALUES ('acme', 'refund', 'k1', 'x', 'test', 'task', 'task_full', 'stage full') RETURNING id`).Scan(&opID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctxDB, `INSERT INTO tasks (operation_id, server, tool, state, deadline, created_at)
		VALUES ($1, 'demo', 'refund', 'working', now() + interval '20 minutes', now() - interval '3 minutes')`, opID); err != nil {
		t.Fatal(err)
	}
	ctx := browser(t)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	u := e.users["operator"]
	row := `tr[data-testid="switch-kill-switch:workflow:refund"]`
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.URL+"/killswitch"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email),
		chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(row+` [data-testid=engage-form]`)),
		chromedp.SendKeys(chromedp.CSS(row+` [data-testid=engage-form] input[name=reason]`), "refunds double-charging"),
		chromedp.Click(chromedp.CSS(row+` [data-testid=engage-form] button`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=engage-confirm]`)),
	); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, `[data-testid=engage-confirm] p`); !strings.Contains(got, "1 running Task will drain") {
		t.Errorf("confirmation says %q", got)
	}
	screenshot(t, ctx, "killswitch-confirm")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`[data-testid=engage-confirm-button]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
	); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, `[data-testid=flash]`); !strings.Contains(got, "kill-switch:workflow:refund engaged") {
		t.Fatalf("flash %q", got)
	}
	if got := text(t, ctx, row+` [data-testid=drain-inflight]`); got != "1" {
		t.Errorf("in flight %q", got)
	}
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(row)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(artifactDir(t), "killswitch-drain-gauge.png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
	if v := e.flags.Check(ctxDB, startOf("refund")); !v.Blocked {
		t.Fatalf("engaged through the browser but starts go ahead: %+v", v)
	}
	// Release asks first, saying what will change.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row+` [data-testid=release-open]`)),
		chromedp.WaitVisible(chromedp.CSS(row+` [data-testid=release-says]`))); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, row+` [data-testid=release-says]`); !strings.Contains(got, "start on their Task route again") || !strings.Contains(got, "1 running Task keeps") {
		t.Errorf("the release confirmation says %q", got)
	}
	screenshot(t, ctx, "killswitch-release-confirm")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(row+` [data-testid=release-form] input[name=reason]`), "fix deployed"),
		chromedp.Click(chromedp.CSS(row+` [data-testid=release-form] button`)),
		chromedp.WaitVisible(chromedp.CSS(row+` [data-testid=engage-form]`)),
	); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, `[data-testid=flash]`); !strings.Contains(got, "released") {
		t.Errorf("flash after release %q", got)
	}
	if v := e.flags.Check(ctxDB, startOf("refund")); v.Blocked {
		t.Fatalf("released through the browser but starts are refused: %+v", v)
	}
}
