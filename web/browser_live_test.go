package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/audit"
)

// TestBrowserLiveListKeepsStill: with the operations list open and the pointer on a row, new
// operations start and another's task completes. Each row stays where it was (0 px) and the row
// under the pointer is the same row; the completed task's state changes in its cell; the new rows
// are announced ("3 new — show") and appear only after "show".
func TestBrowserLiveListKeepsStill(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newOpsEnv(t)
	lctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	<-audit.Listen(lctx, e.pool, nil, e.srv.Publish)
	var ids []string
	for i := range 8 {
		ids = append(ids, e.start(t, "acme", "refund", fmt.Sprintf("still-%d", i), `{"outcome": "hang"}`))
	}
	ctx := e.browserSignIn(t, bctx, "operator", "/operations")
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900), chromedp.Navigate(e.URL+"/operations"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=op-row]`)), chromedp.WaitVisible(chromedp.CSS(`body[data-live-state=stream]`))); err != nil {
		t.Fatal(err)
	}
	positions := func() map[string]float64 {
		t.Helper()
		js, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(Object.fromEntries(Array.from(document.querySelectorAll("[data-testid=op-row]")).map(r => [r.dataset.id, r.getBoundingClientRect().top + window.scrollY])))`))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		if err := json.Unmarshal([]byte(js), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The point of the pointer: the middle of the fourth row.
	hovered := ids[len(ids)-4]
	at, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](fmt.Sprintf(`(() => { const r = document.querySelector('[data-testid=op-row][data-id="%s"]').getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`, hovered)))
	if err != nil || len(at) != 2 {
		t.Fatalf("row position: %v %v", at, err)
	}
	if under, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.elementFromPoint(%f, %f).closest('tr').dataset.id`, at[0], at[1]))); err != nil || under != hovered {
		t.Fatalf("the point is over %q, not %q (%v)", under, hovered, err)
	}
	before := positions()
	changed := ids[len(ids)-6]
	stateBefore := text(t, ctx, `[data-testid=op-row][data-id="`+changed+`"] [data-testid=task-state]`)

	// Three new operations, and one task completes.
	var added []string
	for i := range 3 {
		added = append(added, e.start(t, "acme", "refund", fmt.Sprintf("new-%d", i), `{"outcome": "hang"}`))
	}
	if _, err := e.pool.Exec(context.Background(), `UPDATE tasks SET state = 'completed', terminal_at = now(), next_poll_at = NULL WHERE operation_id = $1`, changed); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO task_timeline (operation_id, source, state, message) VALUES ($1, 'poll', 'completed', '')`, changed); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the announcement of 3 new rows and the changed cell", fmt.Sprintf(`(() => {
		const b = document.querySelector('[data-testid=live-new]');
		const c = document.querySelector('[data-testid=op-row][data-id="%s"] [data-testid=task-state]');
		return b !== null && !b.hidden && b.textContent.includes('3 new') && c !== null && c.textContent !== %q;
	})()`, changed, stateBefore))
	screenshot(t, ctx, "live-list-announced")
	after := positions()
	for id, y := range before {
		if got, ok := after[id]; !ok {
			t.Errorf("row %s left the list without being asked", id)
		} else if d := math.Abs(got - y); d != 0 {
			t.Errorf("row %s moved %.1f px", id, d)
		}
	}
	for _, id := range added {
		if _, ok := after[id]; ok {
			t.Errorf("new row %s was inserted before the person asked", id)
		}
	}
	under, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(() => { const tr = document.elementFromPoint(%f, %f).closest('tr'); return tr ? tr.dataset.id || '' : ''; })()`, at[0], at[1])))
	if err != nil || under != hovered {
		t.Errorf("the row under the pointer is %q, was %q (%v)", under, hovered, err)
	}
	if got := text(t, ctx, `[data-testid=op-row][data-id="`+changed+`"] [data-testid=task-state]`); !strings.Contains(strings.ToLower(got), "complet") {
		t.Errorf("the completed task's cell says %q", got)
	}

	// "show" puts the new rows in.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=live-new-show]`))); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the new rows after show", fmt.Sprintf(`document.querySelector('[data-testid=op-row][data-id="%s"]') !== null && document.querySelector('[data-testid=live-new]').hidden`, added[0]))
	for _, id := range added {
		if !present(t, ctx, `[data-testid=op-row][data-id="`+id+`"]`) {
			t.Errorf("new row %s missing after show", id)
		}
	}
	screenshot(t, ctx, "live-list-shown")
}
