package web

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestBrowserRolloutRollbackPromotePause walks the Rollouts page in Chromium: roll refund back
// (confirmation, drain), promote it with passing gates (confirmation naming the move) and pause
// it, screenshotting each page.
func TestBrowserRolloutRollbackPromotePause(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollouts(t, e)
	ctx := browser(t)
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	u := e.users["operator"]
	sec := `section[data-testid="rollout-refund"]`
	move := func(action, reason, shot string) {
		t.Helper()
		form := sec + ` [data-testid="` + action + `-form-refund"]`
		if err := chromedp.Do(ctx,
			chromedp.WaitVisible(chromedp.CSS(form)),
			chromedp.SendKeys(chromedp.CSS(form+` input[name=reason]`), reason),
			chromedp.Click(chromedp.CSS(form+` button`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=move-confirm]`)),
		); err != nil {
			t.Fatalf("%s: %v", action, err)
		}
		screenshot(t, ctx, "rollouts-"+shot+"-confirm")
		if err := chromedp.Do(ctx,
			chromedp.Click(chromedp.CSS(`[data-testid=move-confirm-button]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`)),
		); err != nil {
			t.Fatalf("%s confirm: %v", action, err)
		}
		screenshot(t, ctx, "rollouts-"+shot)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(e.URL+"/rollouts"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email),
		chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)),
		chromedp.WaitVisible(chromedp.CSS(sec)),
	); err != nil {
		t.Fatal(err)
	}
	move("rollback", "canary errors", "rollback")
	if got := text(t, ctx, sec+` [data-testid=rollout-stage]`); !strings.HasPrefix(got, "off") {
		t.Fatalf("after rollback the stage reads %q", got)
	}
	if !present(t, ctx, sec+` [data-testid=rollout-drain]`) {
		t.Error("no drain after the rollback")
	}
	if v := e.flags.Check(context.Background(), startOf("refund")); !v.Blocked {
		t.Fatalf("rolled back through the browser but the kill switch is released: %+v", v)
	}
	passRefundGates(t, e)
	move("promote", "gates passed", "promote")
	if got := text(t, ctx, sec+` [data-testid=rollout-stage]`); !strings.HasPrefix(got, "shadow") {
		t.Fatalf("after promote the stage reads %q", got)
	}
	move("pause", "watching latency", "pause")
	if got := text(t, ctx, sec+` [data-testid=rollout-paused]`); !strings.Contains(got, "watching latency") {
		t.Fatalf("paused reads %q", got)
	}
}
