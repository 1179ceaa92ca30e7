package web

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// testidText returns the text between the element with data-testid=id and its closing tag name
// (good enough for flat cells); "" when the test id is absent.
func testidText(body, id, tag string) string {
	i := strings.Index(body, `data-testid="`+id+`"`)
	if i < 0 {
		return ""
	}
	rest := body[i:]
	if j := strings.Index(rest, "</"+tag+">"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// CONSOLE.md rule 9: every server with the kill switch of its workflows and how many running
// tasks it drains. Rule 11: the table exports as CSV and JSON.
func TestServersShowKillSwitchDrainAndExport(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	withRollout(t, e)

	_, body := e.do(t, "viewer", http.MethodGet, "/servers", nil)
	cell := testidText(body, "kill-switch", "td")
	if !strings.Contains(cell, "released") || !strings.Contains(cell, `data-testid="drain"`) || !strings.Contains(cell, "engaging would drain 0 running tasks") {
		t.Fatalf("kill switch cell with every switch released:\n%s", cell)
	}
	if !has(body, "export-csv") || !has(body, "export-json") {
		t.Error("the servers table has no CSV/JSON export")
	}

	if err := killswitch.NewStore(e.pool).Engage(context.Background(), audit.Actor{Name: "test", Kind: audit.KindCLI},
		killswitch.ScopeWorkflow, "refund", "incident"); err != nil {
		t.Fatal(err)
	}
	// The console's cache hears of the switch through the database's notification.
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body = e.do(t, "viewer", http.MethodGet, "/servers", nil)
		if cell = testidText(body, "kill-switch", "td"); strings.Contains(cell, "engaged for") || time.Now().After(end) {
			break
		}
	}
	if !strings.Contains(cell, "engaged for 1 of") || !strings.Contains(cell, "badge bad") || !strings.Contains(cell, "0 running tasks draining") {
		t.Fatalf("kill switch cell with refund engaged:\n%s", cell)
	}

	res, body := e.do(t, "viewer", http.MethodGet, "/servers?format=csv", nil)
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("servers CSV: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil || len(recs) != 2 || recs[0][0] != "name" || recs[1][0] != "demo" || !strings.HasPrefix(recs[1][len(recs[1])-2], "engaged for 1 of") {
		t.Fatalf("servers CSV: %v\n%s", err, body)
	}
	res, body = e.do(t, "viewer", http.MethodGet, "/servers?format=json", nil)
	var doc struct {
		Servers []map[string]string `json:"servers"`
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &doc) != nil || len(doc.Servers) != 1 || doc.Servers[0]["running_tasks"] != "0" {
		t.Fatalf("servers JSON: %d\n%s", res.StatusCode, body)
	}
	if res, _ := e.do(t, "viewer", http.MethodGet, "/servers?format=xml", nil); res.StatusCode != http.StatusBadRequest {
		t.Errorf("servers?format=xml: %d, want 400", res.StatusCode)
	}
}

// CONSOLE.md rule 11: the audit log exports as CSV and JSON, with the page's filters and within
// the reader's tenant scope.
func TestAuditExportsInScope(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.openItem(t, "acme", "k-acme", reconcile.ReasonSyncTimeout)
	e.openItem(t, "globex", "k-globex", reconcile.ReasonSyncTimeout)

	_, body := e.do(t, "viewer", http.MethodGet, "/audit", nil)
	if !has(body, "export-csv") || !has(body, "export-json") {
		t.Fatal("the audit log has no CSV/JSON export")
	}
	res, body := e.do(t, "admin", http.MethodGet, "/audit?format=csv", nil)
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if res.StatusCode != http.StatusOK || err != nil || len(recs) < 3 || recs[0][1] != "at" {
		t.Fatalf("audit CSV: %d %v\n%s", res.StatusCode, err, body)
	}
	res, body = e.do(t, "acme-viewer", http.MethodGet, "/audit?format=json", nil)
	var doc struct {
		Audit []map[string]string `json:"audit"`
	}
	if res.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &doc) != nil || len(doc.Audit) == 0 {
		t.Fatalf("audit JSON: %d\n%s", res.StatusCode, body)
	}
	for _, a := range doc.Audit {
		if a["tenant"] != "acme" && a["tenant"] != "" {
			t.Errorf("acme-viewer's export holds an entry of tenant %q", a["tenant"])
		}
	}
	if res, _ := e.do(t, "acme-viewer", http.MethodGet, "/audit?format=csv&tenant=globex", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("acme-viewer exporting globex: %d, want 404 (refused like any other page out of scope)", res.StatusCode)
	}
}

// CONSOLE.md rules 2 and 10: a queue row shows the task state beside the domain outcome, in
// words ("no task" when the route ran none), and the reason in words.
func TestReconcileQueueRowStatesInWords(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	id := e.openItem(t, "acme", "k1", reconcile.ReasonSyncTimeout)

	_, body := e.do(t, "support", http.MethodGet, "/reconcile?state=", nil)
	row := testidText(body, "item-"+id, "tr")
	if row == "" {
		t.Fatalf("no queue row for item %s:\n%s", id, body)
	}
	for testid, want := range map[string]string{
		"item-task-state": "no task",
		"item-outcome":    "unknown",
		"item-reason":     reconcile.ReasonText(reconcile.ReasonSyncTimeout),
	} {
		if got := testidText(row, testid, "td"); !strings.Contains(got, want) {
			t.Errorf("%s = %q, want it to say %q", testid, got, want)
		}
	}
}

// CONSOLE.md rule 3: the polls that saw no change are one collapsed timeline line with a count.
func TestTimelineCollapsesQuietPolls(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	v := OperationView{D: operations.Detail{Operation: operations.Operation{Task: &operations.Task{State: operations.StateWorking, Polls: 12, NextPollAt: &at}}},
		Timeline: []TimelineLine{{At: at, Until: at, Source: operations.SourcePoll, State: "working", Count: 2}, {At: at, Until: at, Source: "create", State: "creating", Count: 1}}}
	var buf bytes.Buffer
	if err := opTimeline(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	line := testidText(buf.String(), "timeline-quiet-polls", "tr")
	if !strings.Contains(line, "× 10") || !strings.Contains(line, "10 routine polls saw no change") {
		t.Fatalf("collapsed quiet polls line:\n%s", buf.String())
	}
	v.D.Task.Polls = 2
	buf.Reset()
	if err := opTimeline(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	if has(buf.String(), "timeline-quiet-polls") {
		t.Error("a quiet-polls line when every poll is already on the timeline")
	}
	// The server's reply to a cancel and the status it carried are no polls: they leave the
	// count of quiet polls alone.
	v.D.Task.Polls = 12
	v.Timeline = append(v.Timeline, TimelineLine{At: at, Until: at, Source: operations.SourceCancelReply, State: "cancel_acknowledged", Count: 1},
		TimelineLine{At: at, Until: at, Source: operations.SourceCancelReply, State: "cancelled", Count: 1})
	buf.Reset()
	if err := opTimeline(v).Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	if line := testidText(buf.String(), "timeline-quiet-polls", "tr"); !strings.Contains(line, "10 routine polls saw no change") {
		t.Fatalf("quiet polls after a cancel reply:\n%s", line)
	}
}

// CONSOLE.md rule 6: when the retention janitor has removed a task's envelope and timeline, the
// page says so instead of showing nothing.
func TestOperationSaysWhenItsEnvelopeWasPruned(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "p-1", `{"outcome": "hang"}`)
	ctx := context.Background()
	for _, q := range []string{
		`UPDATE tasks SET state = 'completed', result_state = 'fetched', terminal_at = now() - interval '400 days', next_poll_at = NULL WHERE operation_id = $1`,
		`DELETE FROM task_envelopes WHERE operation_id = $1`,
		`DELETE FROM task_timeline WHERE operation_id = $1`,
	} {
		if _, err := e.pool.Exec(ctx, q, id); err != nil {
			t.Fatal(err)
		}
	}
	_, body := e.do(t, "viewer", http.MethodGet, "/operations/"+id, nil)
	if !has(body, "envelope-pruned") || !strings.Contains(testidText(body, "envelope-pruned", "div"), "pruned after the retention period") {
		t.Fatalf("no pruned notice:\n%s", body)
	}
	if !strings.Contains(testidText(body, "timeline-empty", "tr"), "pruned after the retention period") {
		t.Errorf("the empty timeline does not say it was pruned")
	}
	if !strings.Contains(testidText(body, "server-state", "dd"), "no, pruned after the retention period") {
		t.Errorf("server state: %s", testidText(body, "server-state", "dd"))
	}
}
