package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/reconcile"
)

// A bulk batch is shown, linked, exported and audited by its public id only; its page answers
// another tenant's batch, a missing one, an old numeric id and a malformed one with the same
// 404 page as for items.
func TestReconcileBatchPublicIDs(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	// Row keys far from anything else on the pages, so a leak of one is seen.
	if _, err := e.pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('reconciliation_batches', 'id'), 987654320)`); err != nil {
		t.Fatal(err)
	}
	e.openItem(t, "acme", "bb1", reconcile.ReasonHumanHandoff)
	e.openItem(t, "globex", "bb2", reconcile.ReasonHumanHandoff)
	batchRe := regexp.MustCompile(`data-batch="([^"]+)"`)
	run := func(tenant, action string) (string, string) {
		t.Helper()
		res, body := e.do(t, "support", "POST", "/reconcile/bulk", url.Values{"tenant": {tenant}, "action": {action},
			"confirm": {reconcile.ConfirmPhrase(action, 1)}, "outcome": {"applied"}, "reason_text": {"verified in the system of record"},
			"note": {"seen in the ledger"}, "evidence_url": {"https://tickets.example/1"}})
		m := batchRe.FindStringSubmatch(body)
		if res.StatusCode != http.StatusOK || m == nil {
			t.Fatalf("bulk %s on %s: %d\n%.400s", action, tenant, res.StatusCode, body)
		}
		return m[1], body
	}
	acmeBatch, body := run("acme", "resolve")
	globexBatch, _ := run("globex", "claim")
	for _, id := range []string{acmeBatch, globexBatch} {
		if !reconcile.ValidID(id) {
			t.Fatalf("batch shown as %q, not a UUID", id)
		}
	}
	if acmeBatch == globexBatch || acmeBatch[:8] == globexBatch[:8] {
		t.Fatalf("two batches %s and %s look sequential", acmeBatch, globexBatch)
	}
	if strings.Contains(body, "98765432") || !strings.Contains(body, "Batch "+acmeBatch) ||
		!strings.Contains(body, `href="/reconcile/batches/`+acmeBatch+`"`) {
		t.Fatalf("bulk result does not name and link the batch by its public id:\n%.600s", body)
	}

	// The batch's page, in scope.
	res, page := e.do(t, "acme-viewer", "GET", "/reconcile/batches/"+acmeBatch, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(page, `data-batch="`+acmeBatch+`"`) || strings.Contains(page, "98765432") ||
		!strings.Contains(page, `data-testid="batch-resolved"`) {
		t.Fatalf("batch page: %d\n%.600s", res.StatusCode, page)
	}
	// The export names the resolving batch by its public id.
	_, export := e.do(t, "acme-viewer", "GET", "/reconcile/export?format=json&state=all", nil)
	var doc struct {
		Items []struct {
			BatchID *string `json:"batch_id"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(export), &doc); err != nil {
		t.Fatalf("export: %v\n%.300s", err, export)
	}
	if items := doc.Items; len(items) != 1 || items[0].BatchID == nil || *items[0].BatchID != acmeBatch {
		t.Fatalf("export batch ids: %s", export)
	}
	_, csv := e.do(t, "acme-viewer", "GET", "/reconcile/export?format=csv&state=all", nil)
	if !strings.Contains(csv, acmeBatch) || strings.Contains(csv, "98765432") {
		t.Fatalf("csv export:\n%s", csv)
	}
	// The audit log names and links the batch by its public id.
	_, audit := e.do(t, "admin", "GET", "/audit?target="+url.QueryEscape(reconcile.BatchTarget(acmeBatch)), nil)
	if !strings.Contains(audit, `href="/reconcile/batches/`+acmeBatch+`"`) || strings.Contains(audit, "98765432") {
		t.Fatalf("audit page does not link the batch:\n%.800s", audit)
	}

	// Every id that is not a batch in scope answers the item 404 page, byte for byte.
	var seq int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM reconciliation_batches WHERE public_id = $1`, acmeBatch).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	_, itemNotFound := e.do(t, "acme-viewer", "GET", "/reconcile/0b8f6a53-7f0e-4d6a-9c1e-2f4b5d6e7a8b", nil)
	for name, id := range map[string]string{"another tenant's": globexBatch, "missing": "0b8f6a53-7f0e-4d6a-9c1e-2f4b5d6e7a8b",
		"row key": strconv.FormatInt(seq, 10), "malformed": "x%27%3Cb%3E"} {
		res, body := e.do(t, "acme-viewer", "GET", "/reconcile/batches/"+id, nil)
		if res.StatusCode != http.StatusNotFound || body != itemNotFound {
			t.Errorf("%s batch id: %d, and its page differs from a missing item's", name, res.StatusCode)
		}
	}
}
