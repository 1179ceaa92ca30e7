package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/reconcile"
)

// openItem writes an operation of tenant whose outcome is unknown and opens its item through
// reconcile.OpenTx, as the ledger does.
func (e *testEnv) openItem(t testing.TB, tenant, key string, reason reconcile.Reason) string {
	t.Helper()
	ctx := context.Background()
	var id string
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		var op string
		if err := tx.QueryRow(ctx, `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, object_ref, route,
			reason_code, reason, domain_outcome) VALUES ($1,'refund',$2,'h','app','refund A-1042','sync','x','x','unknown') RETURNING id`,
			tenant, key).Scan(&op); err != nil {
			return err
		}
		if _, err := reconcile.OpenTx(ctx, tx, op, reason, "test"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT public_id::text FROM reconciliation_items WHERE operation_id = $1`, op).Scan(&id)
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestReconcilePagesTenantScopeAndAudit(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	acmeItem := e.openItem(t, "acme", "k1", reconcile.ReasonHumanHandoff)
	globexItem := e.openItem(t, "globex", "k2", reconcile.ReasonSyncTimeout)
	path := func(id string) string { return "/reconcile/" + id }

	// The queue in scope only.
	res, body := e.do(t, "acme-viewer", "GET", "/reconcile?state=all", nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="item-`+acmeItem+`"`) ||
		strings.Contains(body, `data-testid="item-`+globexItem+`"`) {
		t.Fatalf("acme viewer's queue: %d\n%.500s", res.StatusCode, body)
	}
	// Another tenant's item does not exist for a scoped reader, and its actions are refused.
	if res, _ := e.do(t, "acme-viewer", "GET", path(globexItem), nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("cross-tenant read: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "acme-admin", "POST", path(globexItem)+"/claim", nil); res.StatusCode != http.StatusNotFound {
		t.Fatalf("cross-tenant claim: %d", res.StatusCode)
	}
	// A missing item and the internal key of a real one (an old numeric link) answer the same
	// 404 page as another tenant's item, so a scoped reader learns nothing by trying ids.
	var seq int64
	if err := e.pool.QueryRow(context.Background(), `SELECT id FROM reconciliation_items WHERE public_id = $1`, acmeItem).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	_, foreignBody := e.do(t, "acme-viewer", "GET", path(globexItem), nil)
	for _, p := range []string{path("0b8f6a53-7f0e-4d6a-9c1e-2f4b5d6e7a8b"), "/reconcile/" + strconv.FormatInt(seq, 10), path("x%27%3Cb%3E")} {
		res, body := e.do(t, "acme-viewer", "GET", p, nil)
		if res.StatusCode != http.StatusNotFound || body != foreignBody {
			t.Fatalf("GET %s: %d, and its page differs from another tenant's item's", p, res.StatusCode)
		}
		if res, _ := e.do(t, "acme-admin", "POST", p+"/claim", nil); res.StatusCode != http.StatusNotFound {
			t.Fatalf("POST %s/claim: %d", p, res.StatusCode)
		}
	}
	// A viewer reads but may not act.
	if res, body := e.do(t, "viewer", "GET", path(acmeItem), nil); res.StatusCode != http.StatusOK || strings.Contains(body, `data-testid="claim"`) {
		t.Fatalf("viewer item page: %d, claim button shown", res.StatusCode)
	}
	if res, _ := e.do(t, "viewer", "POST", path(acmeItem)+"/claim", nil); res.StatusCode != http.StatusForbidden {
		t.Fatalf("viewer claim: %d", res.StatusCode)
	}
	// Support claims; a competing claim is refused, not overwritten.
	req := e.request(t, "support", "POST", path(acmeItem)+"/claim", nil)
	req.Header.Set("X-Request-ID", "claim-1")
	if res, body := send(t, req); res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="resolve-form"`) {
		t.Fatalf("claim: %d\n%.300s", res.StatusCode, body)
	}
	if res, body := e.do(t, "admin", "POST", path(acmeItem)+"/claim", nil); res.StatusCode != http.StatusConflict || !strings.Contains(body, "support@test") {
		t.Fatalf("competing claim: %d", res.StatusCode)
	}
	// The queue shows who holds the claim.
	if _, body := e.do(t, "viewer", "GET", "/reconcile", nil); !strings.Contains(body, "support@test") {
		t.Fatal("the claim holder is not shown in the queue")
	}
	// Resolve needs a note and an evidence link.
	if res, _ := e.do(t, "support", "POST", path(acmeItem)+"/resolve", url.Values{"outcome": {"applied"},
		"reason": {"verified in the system of record"}}); res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("resolve without note: %d", res.StatusCode)
	}
	if res, body := e.do(t, "support", "POST", path(acmeItem)+"/resolve", url.Values{"outcome": {"not_applied"},
		"reason": {"confirmed with the customer"}, "note": {"customer saw no refund"}, "evidence_url": {"https://tickets.example/9"}}); res.StatusCode != http.StatusOK ||
		!strings.Contains(body, `data-state="resolved"`) || !strings.Contains(body, `data-testid="retry"`) {
		t.Fatalf("resolve: %d\n%.300s", res.StatusCode, body)
	}
	for _, a := range []string{"reconcile.open", "reconcile.claim", "reconcile.resolve"} {
		found := false
		for _, r := range e.auditRows(t) {
			found = found || r.Action == a
		}
		if !found {
			t.Errorf("no audit row %s", a)
		}
	}
	if r := e.findAudit(t, "reconcile.claim", "claim-1"); r.Actor != "support@test" || r.Tenant != "acme" {
		t.Fatalf("claim audit row %+v", r)
	}
	// Bulk: a wrong confirmation runs nothing; the typed one runs an audited batch.
	form := url.Values{"tenant": {"globex"}, "action": {"claim"}, "confirm": {"claim 2 items"}}
	if res, _ := e.do(t, "support", "POST", "/reconcile/bulk", form); res.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("bulk with a wrong confirmation: %d", res.StatusCode)
	}
	form.Set("confirm", "claim 1 items")
	if res, body := e.do(t, "support", "POST", "/reconcile/bulk", form); res.StatusCode != http.StatusOK || !strings.Contains(body, "applied to 1 of 1") {
		t.Fatalf("bulk: %d\n%.300s", res.StatusCode, body)
	}
	e.findAuditAction(t, "reconcile.batch", "support@test")
}

// TestBrowserReconcileClaimResolve: a support account claims and resolves an item in headless
// Chromium; a viewer sees no actions and is refused when it posts anyway.
func TestBrowserReconcileClaimResolve(t *testing.T) {
	t.Parallel()
	bctx := browser(t)
	e := newTestEnv(t)
	id := e.openItem(t, "acme", "kb", reconcile.ReasonCreateUnacknowledged)
	itemURL := e.URL + "/reconcile/" + id
	signIn := func(t *testing.T, ctx context.Context, who string) {
		u := e.users[who]
		if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/reconcile"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin-form]`)),
			chromedp.SendKeys(chromedp.CSS(`#signin-email`), u.Account.Email), chromedp.SendKeys(chromedp.CSS(`#signin-password`), u.Password),
			chromedp.Click(chromedp.CSS(`[data-testid=signin-submit]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=nav-reconcile]`))); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("support", func(t *testing.T) {
		ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
		defer cancel()
		ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
		defer cancelT()
		signIn(t, ctx, "support")
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`[data-testid=reconcile-queue]`)),
			chromedp.Click(chromedp.CSS(`[data-testid=item-link]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=item]`)),
			chromedp.Click(chromedp.CSS(`[data-testid=item-actions] [data-testid=claim]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=resolve-form]`))); err != nil {
			t.Fatal(err)
		}
		if got := text(t, ctx, `[data-testid=item] [data-testid=claimed-by]`); got != "support@test" {
			t.Fatalf("claimed by %q", got)
		}
		screenshot(t, ctx, "reconcile-claimed")
		// Nothing is chosen in advance: the outcome and the reason start empty and are required.
		preset, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#res-outcome").value + "|" + document.querySelector("#res-reason").value`))
		if err != nil || preset != "|" {
			t.Fatalf("resolve form pre-selects %q (%v)", preset, err)
		}
		firstReason, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#res-reason").options[1].value`))
		if err != nil || firstReason == "" {
			t.Fatalf("resolve form pre-selects %q (%v)", preset, err)
		}
		if err := chromedp.Do(ctx, chromedp.SetValue(chromedp.CSS(`#res-outcome`), "applied"),
			chromedp.SetValue(chromedp.CSS(`#res-reason`), firstReason),
			chromedp.SendKeys(chromedp.CSS(`#res-note`), "receipt found in the ledger"),
			chromedp.SendKeys(chromedp.CSS(`#res-evidence`), "https://ledger.example/r/1"),
			chromedp.Click(chromedp.CSS(`[data-testid=resolve]`)), chromedp.WaitVisible(chromedp.CSS(`[data-testid=item-resolution]`))); err != nil {
			t.Fatal(err)
		}
		if got := text(t, ctx, `[data-testid=item-resolution]`); !strings.HasPrefix(got, "applied by support@test") {
			t.Fatalf("resolution %q", got)
		}
		screenshot(t, ctx, "reconcile-resolved")
		e.findAuditAction(t, "reconcile.claim", "support@test")
		e.findAuditAction(t, "reconcile.resolve", "support@test")
	})
	t.Run("viewer", func(t *testing.T) {
		ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
		defer cancel()
		ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
		defer cancelT()
		signIn(t, ctx, "viewer")
		if err := chromedp.Do(ctx, chromedp.Navigate(itemURL), chromedp.WaitVisible(chromedp.CSS(`[data-testid=item]`))); err != nil {
			t.Fatal(err)
		}
		if present(t, ctx, `[data-testid=item-actions]`) || present(t, ctx, `[data-testid=resolve-form]`) {
			t.Fatal("a viewer sees reconciliation actions")
		}
		// Posting anyway, with a valid CSRF token, is refused.
		js := `fetch(location.pathname + "/claim", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "csrf_token=" + encodeURIComponent(document.querySelector("input[name=csrf_token]").value)}).then(r => r.status)`
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		if status != http.StatusForbidden {
			t.Fatalf("viewer claim status %d, want 403", status)
		}
		screenshot(t, ctx, "reconcile-viewer")
	})
}
