package web

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// TestTimelineNamesItsSource: a cancel sent from the console, the server's acknowledgement and a
// verifier's check each name their real source on the operation's timeline: the person by name,
// the server's answer to the cancel, the verifier; none is credited to "operator".
func TestTimelineNamesItsSource(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "src-1", `{"outcome": "hang"}`)
	if res, _ := e.do(t, "operator", http.MethodPost, "/operations/"+id+"/cancel", url.Values{"reason": {"customer withdrew by phone"}}); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("cancel: %d", res.StatusCode)
	}
	// The verifier's check, written the way the verifier writes it (reconcile's
	// TestNoVerifierAsksAPerson and TestJobAPIVerifier check the verifier writes it so).
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO task_timeline (operation_id, source, state, message) VALUES ($1, 'verifier', 'verified', 'verifier (http): not_applied')`, id); err != nil {
		t.Fatal(err)
	}
	_, body := e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil)
	who := map[string]string{}
	for _, line := range testidAll(body, "timeline-line", "tr") {
		state := firstText(testidText(line, "timeline-who", "td"))
		msg := line
		switch {
		case strings.Contains(msg, "cancel requested by"):
			who["cancel_requested"] = state
		case strings.Contains(msg, "acknowledged the cancel"):
			who["cancel_acknowledged"] = state
		case strings.Contains(msg, "verifier (http)"):
			who["verified"] = state
		}
	}
	// The status the server's reply to the cancel carried is the reply's, not a poll's: no
	// watcher runs, so no line is a poll.
	d := e.b.Detail(t, id)
	carried := false
	for i, te := range d.Timeline {
		carried = carried || i > 0 && d.Timeline[i-1].State == "cancel_acknowledged" && te.State == string(operations.StateCancelled)
	}
	if !carried {
		t.Fatalf("the receiver's cancel reply carried no cancelled status: %+v", d.Timeline)
	}
	for _, line := range testidAll(body, "timeline-line", "tr") {
		if strings.Contains(line, `data-state="cancelled"`) {
			who["cancelled"] = firstText(testidText(line, "timeline-who", "td"))
		}
		if strings.Contains(line, `data-source="poll"`) {
			t.Errorf("a line credited to a poll when no poll ran:\n%s", line)
		}
	}
	for state, want := range map[string]string{"cancel_requested": "operator@test", "cancel_acknowledged": "server's answer to the cancel",
		"cancelled": "server's answer to the cancel", "verified": "verifier"} {
		got := strings.TrimSpace(who[state])
		if !strings.HasPrefix(got, want) {
			t.Errorf("the %s line names %q, want %q", state, got, want)
		}
	}
	for _, w := range testidAll(body, "timeline-who", "td") {
		if firstText(w) == "operator" {
			t.Errorf("a line credited to the bare source \"operator\":\n%s", body)
		}
	}
}

// TestFailureReasonInWords: a tool that answers with an error shows its reason ("declined by the
// system of record") in words beside the outcome, not only inside the preview.
func TestFailureReasonInWords(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "why-1", `{"duration_ms": 10, "outcome": "tool_error", "text": "declined by the system of record"}`)
	_, passes := e.b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 20*time.Second, "the tool error's envelope", func() bool { return e.b.Detail(t, id).Envelope != nil })
	_, body := e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil)
	reason := testidText(body, "outcome-reason", "p")
	if !strings.Contains(reason, "declined by the system of record") || !strings.Contains(reason, "Reason given by the tool") {
		t.Fatalf("outcome reason %q\n%s", reason, body)
	}
	// A completed task without an error has no reason line.
	ok := e.start(t, "acme", "refund", "why-2", `{"duration_ms": 10}`)
	opstest.WaitFor(t, passes, 20*time.Second, "the result's envelope", func() bool { return e.b.Detail(t, ok).Envelope != nil })
	if _, body := e.do(t, "viewer", http.MethodGet, "/operations/"+ok, nil); has(body, "outcome-reason") {
		t.Error("a successful result shows a failure reason")
	}
}

// TestFailureReasonOnEveryList: the reason a tool or a job API gave for a failure is shown, in
// the same words, on the operations list, in the reconciliation queue and on the item page, in
// the inbox (a question the failed task left unanswered), in the API's list and in the export;
// a successful operation shows none.
func TestFailureReasonOnEveryList(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	ctx := context.Background()
	tool := e.start(t, "acme", "refund", "rl-1", `{"duration_ms": 10, "outcome": "tool_error", "text": "declined by the system of record\nsecond line"}`)
	job := e.start(t, "acme", "payout", "rl-2", `{"outcome": "failed"}`)
	ok := e.start(t, "acme", "refund", "rl-3", `{"duration_ms": 10}`)
	_, passes := e.b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 20*time.Second, "the tool error, the failed job and the result", func() bool {
		return e.b.Detail(t, tool).FailureReason != "" && e.b.Detail(t, job).FailureReason != "" && e.b.Detail(t, ok).Envelope != nil
	})
	want := map[string]string{tool: "the tool said: declined by the system of record", job: "the job API said: job failed as requested"}
	rowReason := func(body, id string) string {
		for _, row := range testidAll(body, "op-row", "tr") {
			if strings.Contains(row, `data-id="`+id+`"`) {
				return strings.Join(strings.Fields(html.UnescapeString(stripTags(testidText(row, "row-reason", "div")))), " ")
			}
		}
		t.Fatalf("no row for %s", id)
		return ""
	}
	_, list := e.do(t, "viewer", http.MethodGet, "/operations", nil)
	for id, w := range want {
		if got := rowReason(list, id); got != w {
			t.Errorf("operations list row of %s says %q, want %q", id, got, w)
		}
	}
	if got := rowReason(list, ok); got != "" {
		t.Errorf("a successful operation's row gives a failure reason %q", got)
	}
	// The operation page says the same words.
	_, page := e.do(t, "viewer", http.MethodGet, "/operations/"+job, nil)
	if r := html.UnescapeString(stripTags(testidText(page, "outcome-reason", "p"))); !strings.Contains(r, "Reason given by the job API") || !strings.Contains(r, "job failed as requested") {
		t.Errorf("the operation page's reason %q", r)
	}
	// The API's list carries it.
	_, api := e.apiDo(t, "acme-token", http.MethodGet, "/api/v1/operations?workflow=refund", "", nil)
	var pg operations.Page
	if err := json.Unmarshal([]byte(api), &pg); err != nil {
		t.Fatal(err)
	}
	for _, op := range pg.Operations {
		if w := map[string]string{tool: "declined by the system of record", ok: ""}[op.ID]; op.FailureReason != w {
			t.Errorf("API: %s failure_reason %q, want %q", op.ID, op.FailureReason, w)
		}
	}
	if _, csv := e.do(t, "viewer", http.MethodGet, "/operations/export?format=csv&workflow=refund", nil); !strings.Contains(csv, "declined by the system of record,tool") {
		t.Errorf("the CSV export lacks the reason:\n%s", csv)
	}

	// The tool error's outcome went to reconciliation; the queue's row and the item page say why
	// the work failed.
	var item string
	if err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		if _, err := reconcile.OpenTx(ctx, tx, tool, reconcile.ReasonResultUnavailable, "test"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT public_id::text FROM reconciliation_items WHERE operation_id = $1`, tool).Scan(&item)
	}); err != nil {
		t.Fatal(err)
	}
	_, queue := e.do(t, "support", http.MethodGet, "/reconcile", nil)
	row := testidText(queue, "item-"+item, "tr")
	if got := strings.Join(strings.Fields(html.UnescapeString(stripTags(testidText(row, "row-reason", "div")))), " "); got != want[tool] {
		t.Errorf("queue row says %q, want %q", got, want[tool])
	}
	_, itemPage := e.do(t, "support", http.MethodGet, "/reconcile/"+item, nil)
	if r := html.UnescapeString(stripTags(testidText(itemPage, "item-failure-reason", "p"))); !strings.Contains(r, "declined by the system of record") {
		t.Errorf("item page reason %q", r)
	}

	// A question the failed task left unanswered: the inbox says why the task ended.
	if _, err := e.pool.Exec(ctx, `INSERT INTO pending_inputs (operation_id, input_key, method, message, state) VALUES ($1, 'q1', 'elicitation/create', 'Approve?', 'moved_on')`, tool); err != nil {
		t.Fatal(err)
	}
	_, inbox := e.do(t, "operator", http.MethodGet, "/inbox", nil)
	moved := testidText(inbox, "inbox-moved-on", "section")
	if got := strings.Join(strings.Fields(html.UnescapeString(stripTags(testidText(moved, "row-reason", "div")))), " "); got != want[tool] {
		t.Errorf("inbox says %q, want %q:\n%s", got, want[tool], moved)
	}
}

// TestHandoffSaysWhatToDo: a workflow whose fallback is a handoff, started through the API,
// needs a person at once: the operation page says why in words and what to do, with links to
// its reconciliation item and its audit rows; the queue and the item page say the same. Once
// support staff resolve the item, the operation no longer needs a person anywhere.
func TestHandoffSaysWhatToDo(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	res, body := e.apiDo(t, "acme-token", http.MethodPost, "/api/v1/operations",
		`{"workflow": "kyc", "tenant": "acme", "actor": "app:onboarding", "object_ref": "customer C-77", "intended_effect": "verify identity"}`,
		map[string]string{"Idempotency-Key": "kyc-77"})
	var sr operations.StartResponse
	if err := json.Unmarshal([]byte(body), &sr); err != nil || res.StatusCode/100 != 2 || sr.Route != operations.RouteHandoff {
		t.Fatalf("start: %d %s", res.StatusCode, body)
	}
	id := sr.OperationID
	want := adviceFor(reconcile.ReasonHumanHandoff, "")
	if want == "" {
		t.Fatal("no advice for a handoff")
	}
	var item string
	if err := e.pool.QueryRow(context.Background(), `SELECT public_id::text FROM reconciliation_items WHERE operation_id = $1 AND closed_at IS NULL`, id).Scan(&item); err != nil {
		t.Fatalf("the handoff opened no item: %v", err)
	}
	inList := func() bool {
		_, list := e.apiDo(t, "acme-token", http.MethodGet, "/api/v1/operations?attention=true", "", nil)
		return strings.Contains(list, id)
	}
	if !inList() {
		t.Fatal("the handoff is not among the operations needing a person")
	}
	_, page := e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil)
	if why := strings.Join(strings.Fields(stripTags(testidText(page, "needs-person", "div"))), " "); why != "needs a person handed to a person by the workflow" {
		t.Errorf("the operation says %q", why)
	}
	advice := testidText(page, "op-advice", "p")
	if !strings.Contains(html.UnescapeString(advice), want) {
		t.Errorf("operation advice %q, want %q", advice, want)
	}
	for _, link := range []string{`href="/reconcile/` + item + `"`, `href="/audit?target=operation:` + id + `"`} {
		if !strings.Contains(advice, link) {
			t.Errorf("the advice lacks the link %s:\n%s", link, advice)
		}
	}
	_, queue := e.do(t, "support", http.MethodGet, "/reconcile", nil)
	if row := testidText(queue, "item-"+item, "tr"); !strings.Contains(html.UnescapeString(testidText(row, "item-advice", "div")), want) || !strings.Contains(row, `href="/operations/`+id+`"`) {
		t.Errorf("queue row without the handoff's advice or its operation:\n%s", row)
	}
	_, itemPage := e.do(t, "support", http.MethodGet, "/reconcile/"+item, nil)
	if !strings.Contains(html.UnescapeString(testidText(itemPage, "item-advice", "p")), want) {
		t.Errorf("item page without the handoff's advice")
	}

	// Support does the work and resolves the item: nobody is needed any more.
	if res, _ := e.do(t, "support", http.MethodPost, "/reconcile/"+item+"/claim", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("claim: %d", res.StatusCode)
	}
	if res, body := e.do(t, "support", http.MethodPost, "/reconcile/"+item+"/resolve", url.Values{"outcome": {"applied"},
		"reason": {"confirmed with the customer"}, "note": {"identity checked by hand"}, "evidence_url": {"https://tickets.example/77"}}); res.StatusCode != http.StatusOK {
		t.Fatalf("resolve: %d\n%.300s", res.StatusCode, body)
	}
	if inList() {
		t.Error("a resolved handoff still needs a person")
	}
	if _, page := e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil); has(page, "needs-person") || has(page, "op-advice") {
		t.Error("the resolved handoff's page still says it needs a person")
	}
}

// TestEveryReasonSaysWhatToDo: each reconciliation reason code has its own "what to do" text, and
// the queue, the item page and the operation page show it with links to the operation and to the
// audit rows.
func TestEveryReasonSaysWhatToDo(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, r := range reconcile.Reasons() {
		a := adviceFor(r, "")
		if a == "" || a == reconcile.ReasonText(r) {
			t.Errorf("reason %s has no advice of its own", r)
		}
		if other, dup := seen[a]; dup {
			t.Errorf("reasons %s and %s share the same advice", r, other)
		}
		seen[a] = r
	}
	e := newOpsEnv(t)
	item := e.openItem(t, "acme", "todo-1", reconcile.ReasonSyncTimeout)
	want := adviceFor(reconcile.ReasonSyncTimeout, "")
	_, queue := e.do(t, "support", http.MethodGet, "/reconcile", nil)
	row := testidText(queue, "item-"+item, "tr")
	if !strings.Contains(testidText(row, "item-advice", "div"), want) || !has(row, "item-op-link") {
		t.Errorf("queue row without its advice or operation link:\n%s", row)
	}
	_, page := e.do(t, "support", http.MethodGet, "/reconcile/"+item, nil)
	var opID string
	if err := e.pool.QueryRow(context.Background(), `SELECT operation_id FROM reconciliation_items WHERE public_id = $1`, item).Scan(&opID); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(testidText(page, "item-advice", "p"), want) {
		t.Errorf("item page without advice:\n%s", page)
	}
	for _, link := range []string{`href="/operations/` + opID + `"`, `href="/audit?target=operation:` + opID + `"`, `href="/audit?target=reconciliation:` + item + `"`} {
		if !strings.Contains(page, link) {
			t.Errorf("item page lacks the link %s", link)
		}
	}
	_, op := e.do(t, "support", http.MethodGet, "/operations/"+opID, nil)
	if adv := testidText(op, "op-advice", "p"); !strings.Contains(adv, want) || !has(op, "op-advice-item") {
		t.Errorf("operation page advice %q", adv)
	}
}

// testidAll returns, for every element with data-testid=id, the text up to its closing tag.
func testidAll(body, id, tag string) []string {
	var out []string
	mark := `data-testid="` + id + `"`
	for {
		i := strings.Index(body, mark)
		if i < 0 {
			return out
		}
		body = body[i:]
		seg := body
		if j := strings.Index(seg, "</"+tag+">"); j >= 0 {
			seg = seg[:j]
		}
		out = append(out, seg)
		body = body[len(mark):]
	}
}

// firstText is the first text of an element's markup (after its opening tag, before the next tag).
func firstText(seg string) string {
	if i := strings.Index(seg, ">"); i >= 0 {
		seg = seg[i+1:]
	}
	if i := strings.Index(seg, "<"); i >= 0 {
		seg = seg[:i]
	}
	return strings.TrimSpace(html.UnescapeString(seg))
}

// TestQueueFiltersAndAuditSentences: the queue's filters are the operations list's (tenant as a
// select of the policy's tenants, then workflow), in the same order; the audit log filtered by
// operation id reads as sentences with the stored JSON behind a toggle.
func TestQueueFiltersAndAuditSentences(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	_, queue := e.do(t, "support", http.MethodGet, "/reconcile", nil)
	form := testidText(queue, "reconcile-filters", "form")
	tenant := testidText(form, "rf-tenant", "select")
	if len(e.b.Policy.Tenants) < 2 {
		t.Fatalf("the test policy has tenants %v", e.b.Policy.Tenants)
	}
	for _, name := range e.b.Policy.Tenants {
		if !strings.Contains(tenant, `<option value="`+name+`"`) {
			t.Errorf("the tenant select offers no %s:\n%s", name, tenant)
		}
	}
	if i, j := strings.Index(form, `id="rf-tenant"`), strings.Index(form, `id="rf-workflow"`); i < 0 || j < i {
		t.Errorf("tenant (%d) does not come before workflow (%d) as in the operations list", i, j)
	}
	_, ops := e.do(t, "support", http.MethodGet, "/operations", nil)
	if i, j := strings.Index(ops, `id="f-tenant"`), strings.Index(ops, `id="f-workflow"`); i < 0 || j < i {
		t.Fatalf("the operations list's order changed: tenant %d, workflow %d", i, j)
	}

	id := e.start(t, "acme", "refund", "sent-1", `{"outcome": "hang"}`)
	other := e.start(t, "acme", "refund", "sent-2", `{"outcome": "hang"}`)
	for _, op := range []string{id, other} {
		if res, _ := e.do(t, "operator", http.MethodPost, "/operations/"+op+"/cancel", url.Values{"reason": {"customer withdrew"}}); res.StatusCode != http.StatusSeeOther {
			t.Fatalf("cancel: %d", res.StatusCode)
		}
	}
	_, body := e.do(t, "viewer", http.MethodGet, "/audit?operation="+id, nil)
	sentences := testidAll(body, "audit-sentence", "td")
	if len(sentences) == 0 || strings.Contains(body, other) {
		t.Fatalf("audit by operation: %d rows, other operation shown %v", len(sentences), strings.Contains(body, other))
	}
	var asked bool
	for _, s := range sentences {
		asked = asked || strings.Contains(s, "operator@test") && strings.Contains(s, "asked to cancel") && strings.Contains(s, "customer withdrew")
	}
	if !asked {
		t.Errorf("no sentence says operator@test asked to cancel:\n%s", strings.Join(sentences, "\n"))
	}
	if n := strings.Count(body, `<details data-testid="audit-json"`); n != len(sentences) {
		t.Errorf("%d JSON toggles for %d rows", n, len(sentences))
	}
	if !strings.Contains(body, `id="f-operation" name="operation" value="`+id+`"`) {
		t.Error("the operation filter field does not show the operation filtered on")
	}
}

// stripTags is the text of a segment testidText returned: the rest of the opening tag and every
// tag dropped, entities left as they are.
func stripTags(seg string) string {
	if i := strings.Index(seg, ">"); i >= 0 {
		seg = seg[i+1:]
	}
	return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(seg, "")
}

// A job's failed status read says why on the operation's page, as data: escaped, and only
// while there is a reason.
func TestAJobsFailedReadSaysWhyOnItsPage(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "payout", "jr-1", `{}`)
	_, body := e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil)
	if !has(body, "job") || has(body, "job-error") {
		t.Fatalf("a job with no failed read:\n%s", testidText(body, "job", "dd"))
	}
	// A reason as a failed read records it, with markup a job API's answer could carry.
	reason := `status read failed: HTTP 503 <img src=x onerror=alert(1)>`
	if _, err := e.pool.Exec(context.Background(), `UPDATE job_runs SET error = $2 WHERE operation_id = $1`, id, reason); err != nil {
		t.Fatal(err)
	}
	_, body = e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil)
	if cell := testidText(body, "job-error", "div"); !strings.Contains(cell, html.EscapeString(reason)) {
		t.Errorf("the failed read's reason is not on the page:\n%s", cell)
	}
	if strings.Contains(body, "<img src=x") {
		t.Error("the job's error reached the page unescaped")
	}
}
