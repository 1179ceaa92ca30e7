package web

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/reconcile"
)

// reconcileStore is the test console's reconciliation store, for changes made "elsewhere".
func (e *testEnv) reconcileStore() *reconcile.Store {
	return e.srv.deps.Reconcile
}

func TestReconcileExportScopeAndFilters(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	a1 := e.openItem(t, "acme", "x1", reconcile.ReasonHumanHandoff)
	a2 := e.openItem(t, "acme", "x2", reconcile.ReasonSyncTimeout)
	g1 := e.openItem(t, "globex", "x3", reconcile.ReasonHumanHandoff)
	// Text from servers and verifiers is data: a formula stays text in a spreadsheet.
	if _, err := e.pool.Exec(context.Background(), `UPDATE reconciliation_items SET detail = '=HYPERLINK("http://evil")' WHERE public_id = $1`, a1); err != nil {
		t.Fatal(err)
	}

	t.Run("csv in scope", func(t *testing.T) {
		t.Parallel()
		res, body := e.do(t, "acme-viewer", "GET", "/reconcile/export?format=csv", nil)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") ||
			!strings.Contains(res.Header.Get("Content-Disposition"), ".csv") {
			t.Fatalf("status %d, headers %v", res.StatusCode, res.Header)
		}
		recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 3 || recs[0][0] != "id" || recs[0][1] != "operation_id" {
			t.Fatalf("want a header and acme's 2 items, got %q", recs)
		}
		col := map[string]int{}
		for i, h := range recs[0] {
			col[h] = i
		}
		ids := map[string]bool{}
		for _, r := range recs[1:] {
			ids[r[col["id"]]] = true
			if r[col["tenant"]] != "acme" {
				t.Fatalf("row of tenant %s in acme's export", r[col["tenant"]])
			}
			if r[col["id"]] == a1 && !strings.HasPrefix(r[col["detail"]], "'=") {
				t.Fatalf("formula not neutralised: %q", r[col["detail"]])
			}
		}
		if !ids[a1] || !ids[a2] || ids[g1] {
			t.Fatalf("ids %v", ids)
		}
	})
	t.Run("json filtered by reason", func(t *testing.T) {
		t.Parallel()
		res, body := e.do(t, "viewer", "GET", "/reconcile/export?format=json&reason=human_handoff", nil)
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d %s", res.StatusCode, res.Header.Get("Content-Type"))
		}
		var out struct {
			Items []struct {
				ID       string `json:"id"`
				Tenant   string `json:"tenant"`
				Reason   string `json:"reason"`
				Text     string `json:"reason_text"`
				Claimed  string `json:"claimed_by"`
				Workflow string `json:"workflow"`
			} `json:"items"`
			Filter map[string]string `json:"filter"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatal(err)
		}
		if len(out.Items) != 2 || out.Filter["reason"] != "human_handoff" {
			t.Fatalf("export %+v", out)
		}
		for _, it := range out.Items {
			if it.Reason != reconcile.ReasonHumanHandoff || it.Text == "" || (it.ID != a1 && it.ID != g1) {
				t.Fatalf("item %+v", it)
			}
		}
	})
	t.Run("claimed by filter", func(t *testing.T) {
		t.Parallel()
		if _, err := e.reconcileStore().Claim(context.Background(), audit.Actor{Name: "support@test", Kind: audit.KindAccount}, reconcile.Scope{All: true}, a2, 0); err != nil {
			t.Fatal(err)
		}
		_, body := e.do(t, "support", "GET", "/reconcile/export?format=json&claimed_by=me", nil)
		if !strings.Contains(body, `"id": "`+a2+`"`) || strings.Contains(body, `"id": "`+a1+`"`) || !strings.Contains(body, `"claimed_by": "support@test"`) {
			t.Fatalf("claimed-by export:\n%s", body)
		}
	})
	t.Run("another tenant is not found", func(t *testing.T) {
		t.Parallel()
		if res, body := e.do(t, "acme-viewer", "GET", "/reconcile/export?format=csv&tenant=globex", nil); res.StatusCode != http.StatusNotFound || strings.Contains(body, "globex,") {
			t.Fatalf("cross-tenant export: %d\n%.200s", res.StatusCode, body)
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		t.Parallel()
		for _, q := range []string{"format=xml", "format=csv&age=soon", "format=json&state=weird"} {
			if res, _ := e.do(t, "viewer", "GET", "/reconcile/export?"+q, nil); res.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: status %d, want 400", q, res.StatusCode)
			}
		}
	})
	t.Run("the queue links the export of its filter", func(t *testing.T) {
		t.Parallel()
		_, body := e.do(t, "viewer", "GET", "/reconcile?reason=sync_timeout", nil)
		if !strings.Contains(body, `href="/reconcile/export?format=csv&amp;reason=sync_timeout"`) {
			t.Fatalf("no export link for the filter\n%.2000s", body)
		}
	})
}

// browserSignIn signs who in on a fresh browser context and returns it.
func (e *testEnv) browserSignIn(t *testing.T, bctx context.Context, who, landing string) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelT)
	u := e.users[who]
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+landing), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
		chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
		chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=nav-reconcile]`))); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// waitJS waits until a JavaScript expression is true in the page.
func waitJS(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestBrowserReconcileLive: a claim made by someone else shows on the queue and on the item
// page without a reload, and a refresh of the item page keeps what a person is typing in the
// resolve form.
func TestBrowserReconcileLive(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	lctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	<-audit.Listen(lctx, e.pool, nil, e.srv.Publish)
	rs := e.reconcileStore()
	other := audit.Actor{Name: "other@test", Kind: audit.KindAccount, Role: "support"}
	queued := e.openItem(t, "acme", "live-1", reconcile.ReasonHumanHandoff)
	mine := e.openItem(t, "acme", "live-2", reconcile.ReasonHumanHandoff)

	ctx := e.browserSignIn(t, bctx, "support", "/reconcile")
	row := `[data-testid="item-` + queued + `"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row+` [data-testid=claim]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-live-state=stream]`))); err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Claim(context.Background(), other, reconcile.Scope{All: true}, queued, 0); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the queue to show the other claim",
		fmt.Sprintf(`(() => { const c = document.querySelector('%s [data-testid=claimed-by]'); return c !== null && c.textContent === 'other@test' && document.querySelector('%s [data-testid=claim]') === null })()`, row, row))
	screenshot(t, ctx, "reconcile-live-queue")

	// The item page: claim it, start typing a resolution, let a change elsewhere refresh the page.
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/reconcile/"+mine), chromedp.WaitVisible(chromedp.CSS(`[data-testid=item-actions] [data-testid=claim]`)),
		chromedp.Click(chromedp.CSS(`[data-testid=item-actions] [data-testid=claim]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=resolve-form]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-live-state=stream]`)),
		chromedp.SendKeys(chromedp.CSS(`#res-note`), "half-written note"),
		chromedp.SendKeys(chromedp.CSS(`#res-evidence`), "https://ledger.example/half")); err != nil {
		t.Fatal(err)
	}
	// A late verifier answer lands, then an audited change (a claim elsewhere) tells the page.
	var opID string
	if err := e.pool.QueryRow(context.Background(), `SELECT operation_id FROM reconciliation_items WHERE public_id = $1`, mine).Scan(&opID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO outcome_verifications (operation_id, item_id, tenant, source, trigger, answer, detail)
		SELECT $1, id, 'acme', 'http', 'reverify', 'unknown', '<b>late answer</b>' FROM reconciliation_items WHERE public_id = $2`, opID, mine); err != nil {
		t.Fatal(err)
	}
	third := e.openItem(t, "acme", "live-3", reconcile.ReasonHumanHandoff)
	if _, err := rs.Claim(context.Background(), other, reconcile.Scope{All: true}, third, 0); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, "the late answer on the item page",
		`Array.from(document.querySelectorAll('[data-testid=verification]')).some(r => r.textContent.includes('<b>late answer</b>'))`)
	if present(t, ctx, `[data-testid=verifications] b`) {
		t.Fatal("a verifier's text was rendered as HTML")
	}
	note, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(`#res-note`)))
	if err != nil {
		t.Fatal(err)
	}
	evidence, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(`#res-evidence`)))
	if err != nil {
		t.Fatal(err)
	}
	if note != "half-written note" || evidence != "https://ledger.example/half" {
		t.Fatalf("the refresh lost what was typed: note %q, evidence %q", note, evidence)
	}
	if got := text(t, ctx, `[data-testid=item] [data-testid=claimed-by]`); got != "support@test" {
		t.Fatalf("claimed by %q", got)
	}
	screenshot(t, ctx, "reconcile-live-item")
}

// TestBrowserReconcileBulk: support filters the queue, sees the preview count, types a wrong
// confirmation (nothing runs), then the right one; the result page shows the batch.
func TestBrowserReconcileBulk(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	var acme []string
	for i := range 3 {
		acme = append(acme, e.openItem(t, "acme", "bulk-"+strconv.Itoa(i), reconcile.ReasonHumanHandoff))
	}
	e.openItem(t, "acme", "bulk-other-reason", reconcile.ReasonSyncTimeout)
	e.openItem(t, "globex", "bulk-globex", reconcile.ReasonHumanHandoff)
	claims := func() int {
		var n int
		if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM reconciliation_items WHERE claimed_by IS NOT NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	ctx := e.browserSignIn(t, bctx, "support", "/reconcile")
	q := url.Values{"tenant": {"acme"}, "reason": {reconcile.ReasonHumanHandoff}}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/reconcile?"+q.Encode()), chromedp.WaitVisible(chromedp.CSS(`[data-testid=bulk]`))); err != nil {
		t.Fatal(err)
	}
	if got := text(t, ctx, `[data-testid=bulk-preview]`); got != "3" {
		t.Fatalf("preview %q, want 3", got)
	}
	openBulk := func(confirm string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`[data-testid=bulk] summary`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=bulk-confirm]`)),
			chromedp.SetValue(chromedp.CSS(`[data-testid=bulk] select[name=action]`), "claim"),
			chromedp.SendKeys(chromedp.CSS(`[data-testid=bulk-confirm]`), confirm),
			chromedp.Click(chromedp.CSS(`[data-testid=bulk-run]`)),
			chromedp.WaitVisible(chromedp.CSS(`[data-testid=flash]`))); err != nil {
			t.Fatal(err)
		}
	}
	openBulk("claim 5 items")
	if got := text(t, ctx, `[data-testid=flash]`); !strings.Contains(got, `"claim 3 items"`) || present(t, ctx, `[data-testid=batch]`) {
		t.Fatalf("wrong phrase: flash %q", got)
	}
	if n := claims(); n != 0 {
		t.Fatalf("a wrong phrase claimed %d items", n)
	}
	screenshot(t, ctx, "reconcile-bulk-refused")
	openBulk("claim 3 items")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`[data-testid=batch]`))); err != nil {
		t.Fatal(err)
	}
	if a, m, s := text(t, ctx, `[data-testid=batch-applied]`), text(t, ctx, `[data-testid=batch-matched]`), text(t, ctx, `[data-testid=batch-skipped]`); a != "3" || m != "3" || s != "0" {
		t.Fatalf("batch applied %s of %s, skipped %s", a, m, s)
	}
	for _, it := range acme {
		if got := text(t, ctx, `[data-testid="item-`+it+`"] [data-testid=claimed-by]`); got != "support@test" {
			t.Fatalf("item %s claimed by %q after the batch", it, got)
		}
	}
	if n := claims(); n != 3 {
		t.Fatalf("%d claims after the batch, want 3", n)
	}
	e.findAuditAction(t, "reconcile.batch", "support@test")
	screenshot(t, ctx, "reconcile-bulk-batch")
}
