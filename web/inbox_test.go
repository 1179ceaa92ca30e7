package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/operations"
)

// tileValue is the number a tile of the overview shows.
func tileValue(t *testing.T, body, testid string) string {
	t.Helper()
	m := regexp.MustCompile(`data-testid="` + testid + `"[^>]*>\s*<div class="label">[^<]*</div>\s*<div class="value">(\d+)</div>`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no tile %s in:\n%.2000s", testid, body)
	}
	return m[1]
}

func countOf(body, testid string) int { return strings.Count(body, `data-testid="`+testid+`"`) }

// seedNeedsPerson makes ops[i] need a person in the ways the definition names, and some not.
func seedNeedsPerson(t *testing.T, e *opsEnv, acme []string, globex string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		// A task waiting for an answer, with its question.
		`UPDATE tasks SET state = 'input_required' WHERE operation_id = '` + acme[0] + `'`,
		`INSERT INTO pending_inputs (operation_id, input_key, method, message) VALUES ('` + acme[0] + `', 'q0', 'elicitation/create', 'Approve the refund?')`,
		// An open question of a task stored as working: asked before the stored state caught up.
		`INSERT INTO pending_inputs (operation_id, input_key, method, message) VALUES ('` + acme[1] + `', 'q1', 'elicitation/create', 'Which account?')`,
		// An open reconciliation item with no attention flag on the operation.
		`INSERT INTO reconciliation_items (operation_id, reason, tenant, workflow, state) VALUES ('` + acme[2] + `', 'sync_timeout', 'acme', 'refund', 'needs_person')`,
		// A closed one: settled, nobody is needed.
		`INSERT INTO reconciliation_items (operation_id, reason, tenant, workflow, state, closed_at) VALUES ('` + acme[3] + `', 'sync_timeout', 'acme', 'refund', 'resolved', now())`,
		// An open handoff.
		`INSERT INTO handoff_items (operation_id) VALUES ('` + acme[4] + `')`,
		// A stale attention flag with nothing open behind it is not a person's work.
		`UPDATE operations SET attention = 'needs_reconciliation', attention_reason = 'sync_timeout' WHERE id = '` + acme[5] + `'`,
		// Another tenant's question.
		`INSERT INTO pending_inputs (operation_id, input_key, method, message) VALUES ('` + globex + `', 'qg', 'elicitation/create', 'Globex asks')`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestNeedsAPersonIsOneCount checks that the overview's tile, the operations list (its count and
// its "needs a person" group), the filter and the API all give the same real total from one
// definition, per tenant scope, and that the questions tile equals the inbox.
func TestNeedsAPersonIsOneCount(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	var acme []string
	for i := range 7 {
		acme = append(acme, e.start(t, "acme", "refund", fmt.Sprintf("np-%d", i), `{"outcome": "hang"}`))
	}
	globex := e.start(t, "globex", "refund", "np-g", `{"outcome": "hang"}`)
	seedNeedsPerson(t, e, acme, globex)

	for _, c := range []struct {
		who, token         string
		want, wantQuestion int
	}{{"acme-viewer", "acme-token", 4, 2}, {"operator", "", 5, 3}} {
		_, home := e.do(t, c.who, "GET", "/", nil)
		if got := tileValue(t, home, "tile-person"); got != fmt.Sprint(c.want) {
			t.Errorf("%s: tile says %s, want %d", c.who, got, c.want)
		}
		if got := tileValue(t, home, "tile-questions"); got != fmt.Sprint(c.wantQuestion) {
			t.Errorf("%s: questions tile says %s, want %d", c.who, got, c.wantQuestion)
		}
		if !strings.Contains(home, `href="/operations?attention=true" data-testid="tile-person"`) ||
			!strings.Contains(home, `href="/inbox" data-testid="tile-questions"`) || !strings.Contains(home, `href="/reconcile" data-testid="tile-recon"`) {
			t.Errorf("%s: a tile does not link to the list it counts", c.who)
		}
		// Questions first in the overview's list.
		first := regexp.MustCompile(`data-testid="person"[\s\S]*?data-id="([^"]+)"`).FindStringSubmatch(home)
		if first == nil || (first[1] != acme[0] && first[1] != acme[1] && first[1] != globex) {
			t.Errorf("%s: the first row needing a person is not a question: %v", c.who, first)
		}
		_, list := e.do(t, c.who, "GET", "/operations?attention=true", nil)
		if !strings.Contains(list, fmt.Sprintf("Showing %d of %d", c.want, c.want)) {
			t.Errorf("%s: list count: %s", c.who, sliceAfter(list, `data-testid="ops-count"`))
		}
		group := sliceAfterAll(list, `data-testid="group-person"`)
		if n := countOf(group, "op-row"); n != c.want || countOf(list, "op-row") != c.want {
			t.Errorf("%s: %d rows in the needs-a-person group, %d in the list; want %d", c.who, n, countOf(list, "op-row"), c.want)
		}
		// The full list files the same operations under "needs a person".
		_, all := e.do(t, c.who, "GET", "/operations", nil)
		if n := strings.Count(groupSection(all, "group-person"), `data-testid="op-row"`); n != c.want {
			t.Errorf("%s: unfiltered list files %d under needs a person, want %d", c.who, n, c.want)
		}
		_, inbox := e.do(t, c.who, "GET", "/inbox", nil)
		if n := countOf(inbox, "inbox-question"); n != c.wantQuestion || !strings.Contains(inbox, fmt.Sprintf("Showing %d of %d open questions", c.wantQuestion, c.wantQuestion)) {
			t.Errorf("%s: inbox holds %d questions, want %d", c.who, n, c.wantQuestion)
		}
		if c.token == "" {
			continue
		}
		for _, limit := range []string{"", "&limit=2"} {
			res, body := e.apiDo(t, c.token, "GET", "/api/v1/operations?attention=true"+limit, "", nil)
			var page operations.Page
			if err := json.Unmarshal([]byte(body), &page); err != nil || res.StatusCode != 200 {
				t.Fatalf("api: %d %s", res.StatusCode, body)
			}
			wantLen := c.want
			if limit != "" {
				wantLen = 2
			}
			if page.Total != c.want || len(page.Operations) != wantLen {
				t.Errorf("api%s: total %d, %d operations; want total %d and %d", limit, page.Total, len(page.Operations), c.want, wantLen)
			}
			for _, op := range page.Operations {
				if !op.NeedsPerson {
					t.Errorf("api: %s listed as needing a person without the flag", op.ID)
				}
			}
		}
	}
}

// sliceAfterAll is everything after sep.
func sliceAfterAll(s, sep string) string {
	_, after, _ := strings.Cut(s, sep)
	return after
}

// groupSection is the rows of one attention group of the operations list: from its header to
// the next group's.
func groupSection(body, testid string) string {
	after := sliceAfterAll(body, `data-testid="`+testid+`"`)
	if i := strings.Index(after, `data-testid="group-`); i >= 0 {
		return after[:i]
	}
	return after
}

// TestInboxMarksWhatIsNewAndWhatCannotBeAnswered checks the per-person "new since you last
// looked" marker, the loud notice on a question whose task ended, that an open question of a
// task stored as working is answerable (no notice, a form), and that no yes/no answer is chosen
// in advance.
func TestInboxMarksWhatIsNewAndWhatCannotBeAnswered(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	var acme []string
	for i := range 7 {
		acme = append(acme, e.start(t, "acme", "refund", fmt.Sprintf("in-%d", i), `{"outcome": "hang"}`))
	}
	globex := e.start(t, "globex", "refund", "in-g", `{"outcome": "hang"}`)
	seedNeedsPerson(t, e, acme, globex)
	if _, err := e.pool.Exec(context.Background(), `UPDATE pending_inputs SET fields = '[{"name":"approve","type":"boolean","required":true}]' WHERE input_key = 'q0'`); err != nil {
		t.Fatal(err)
	}

	if _, err := e.pool.Exec(context.Background(), `UPDATE tasks SET state = 'completed' WHERE operation_id = $1`, globex); err != nil {
		t.Fatal(err)
	}

	_, body := e.do(t, "operator", "GET", "/inbox", nil)
	if !strings.Contains(body, "First visit") || countOf(body, "inbox-stale") != 1 {
		t.Fatalf("first visit: stale %d, want 1 (the ended task's)\n%s", countOf(body, "inbox-stale"), body)
	}
	if !strings.Contains(body, "The task ended without this answer (completed)") {
		t.Fatal("a question whose task ended does not say so")
	}
	asked := 0
	for _, q := range testidAll(body, "inbox-question", "li") {
		if !strings.Contains(q, "Which account?") {
			continue
		}
		asked++
		if has(q, "inbox-stale") || !has(q, "input-form") {
			t.Errorf("an open question of a task stored as working is not answerable here:\n%s", q)
		}
	}
	if asked != 1 {
		t.Fatalf("the question of the working task is listed %d times", asked)
	}
	if !has(body, "input-form") || !strings.Contains(body, `<option value="" selected>choose…</option>`) ||
		regexp.MustCompile(`<option value="(true|false)" selected`).MatchString(body) {
		t.Fatalf("the inbox's answer form pre-selects an answer or is missing:\n%s", body)
	}
	_, body = e.do(t, "operator", "GET", "/inbox", nil)
	if !strings.Contains(body, `<span data-testid="inbox-new">0 new</span>`) {
		t.Fatalf("second visit: %s", sliceAfter(body, `data-testid="inbox-count"`))
	}
	// Another person has not looked yet: everything is new to them.
	_, body = e.do(t, "support", "GET", "/inbox", nil)
	if !strings.Contains(body, "First visit") {
		t.Fatal("support's marker follows the operator's")
	}
	if _, err := e.pool.Exec(context.Background(), `INSERT INTO pending_inputs (operation_id, input_key, method, message, requested_at)
		VALUES ($1, 'q6', 'elicitation/create', 'New question', now() + interval '1 second')`, acme[6]); err != nil {
		t.Fatal(err)
	}
	_, body = e.do(t, "operator", "GET", "/inbox", nil)
	if !strings.Contains(body, `<span data-testid="inbox-new">1 new</span>`) {
		t.Fatalf("after a new question: %s", sliceAfter(body, `data-testid="inbox-count"`))
	}
	// A required yes/no left at "choose" is refused, not sent as "yes" or "no".
	res, body := e.do(t, "operator", "POST", "/operations/"+acme[0]+"/input", map[string][]string{"key": {"q0"}, "action": {"accept"}, "back": {"inbox"}})
	if res.StatusCode != 422 || !strings.Contains(body, "The server requires approve.") {
		t.Fatalf("an unanswered yes/no was accepted: %d", res.StatusCode)
	}
}

// TestSearchFindsAnOperationByAnyOfItsKeys searches the operations list by business key (a
// part of it), operation id, task id and idempotency key, within the tenant scope.
func TestSearchFindsAnOperationByAnyOfItsKeys(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "srch-1042", `{"outcome": "hang"}`)
	other := e.start(t, "acme", "refund", "srch-7", `{"outcome": "hang"}`)
	globex := e.start(t, "globex", "refund", "srch-g", `{"outcome": "hang"}`)
	d := e.b.Detail(t, id)
	if d.Task == nil || d.Task.TaskID == "" {
		t.Fatal("no task id")
	}
	for _, q := range []string{"A-srch-1042", "a-SRCH-104", id, strings.ToUpper(id), d.Task.TaskID, "srch-1042"} {
		_, body := e.do(t, "acme-viewer", "GET", "/operations?q="+url.QueryEscape(q), nil)
		if !strings.Contains(body, id) || strings.Contains(body, other) || !strings.Contains(body, "Showing 1 of 1") {
			t.Errorf("search %q: %s", q, sliceAfter(body, `data-testid="ops-count"`))
		}
	}
	// Another tenant's operation is not found, even by its exact id; a wildcard is literal.
	for _, q := range []string{globex, "%", "srch_1"} {
		if _, body := e.do(t, "acme-viewer", "GET", "/operations?q="+url.QueryEscape(q), nil); strings.Contains(body, `data-testid="op-row"`) {
			t.Errorf("search %q found rows", q)
		}
	}
	if _, body := e.do(t, "viewer", "GET", "/audit", nil); !has(body, "site-search") {
		t.Error("no search box on the audit page")
	}
}

// TestAuditRowsOfAnOperation follows an operation's link to its audit rows: only its rows, each
// target a link back to the operation.
func TestAuditRowsOfAnOperation(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	id := e.start(t, "acme", "refund", "aud-1", `{"outcome": "hang"}`)
	other := e.start(t, "acme", "refund", "aud-2", `{"outcome": "hang"}`)
	for _, op := range []string{id, other} {
		if res, _ := e.do(t, "operator", "POST", "/operations/"+op+"/cancel", url.Values{"reason": {"customer asked"}}); res.StatusCode != 303 {
			t.Fatalf("cancel: %d", res.StatusCode)
		}
	}
	_, page := e.do(t, "operator", "GET", "/operations/"+id, nil)
	link := `href="/audit?target=operation:` + id + `"`
	if !strings.Contains(page, link) {
		t.Fatal("the operation does not link to its audit rows")
	}
	_, body := e.do(t, "operator", "GET", "/audit?target="+url.QueryEscape("operation:"+id), nil)
	if countOf(body, "audit-row") == 0 || strings.Contains(body, other) || !has(body, "audit-target-filter") {
		t.Fatalf("audit rows of the operation: %d rows, other shown %v", countOf(body, "audit-row"), strings.Contains(body, other))
	}
	if countOf(body, "audit-target") != countOf(body, "audit-row") || !strings.Contains(body, `href="/operations/`+id+`" data-testid="audit-target"`) {
		t.Fatalf("targets are not links: %d of %d", countOf(body, "audit-target"), countOf(body, "audit-row"))
	}
}

// TestUnansweredQuestionSaysSoLoudly: a question whose deadline passed, whose task expired or
// became unobservable, or whose task moved on, says so in red on its operation's page and in
// the inbox, in words, and offers no form to answer it.
func TestUnansweredQuestionSaysSoLoudly(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	ctx := context.Background()
	ops := map[string]string{}
	for _, k := range []string{"deadline", "unobservable", "expired", "moved"} {
		ops[k] = e.start(t, "acme", "refund", "loud-"+k, `{"outcome": "hang"}`)
	}
	for _, q := range []struct{ sql, op string }{
		{`UPDATE tasks SET state = 'input_required' WHERE operation_id = $1`, "deadline"},
		{`INSERT INTO pending_inputs (operation_id, input_key, method, message, expires_at) VALUES ($1, 'qd', 'elicitation/create', 'Approve before noon?', now() - interval '1 minute')`, "deadline"},
		{`UPDATE tasks SET state = 'unobservable' WHERE operation_id = $1`, "unobservable"},
		{`INSERT INTO pending_inputs (operation_id, input_key, method, message, state) VALUES ($1, 'qu', 'elicitation/create', 'Which account?', 'expired')`, "unobservable"},
		{`UPDATE tasks SET state = 'expired' WHERE operation_id = $1`, "expired"},
		{`INSERT INTO pending_inputs (operation_id, input_key, method, message) VALUES ($1, 'qe', 'elicitation/create', 'Confirm the address?')`, "expired"},
		{`INSERT INTO pending_inputs (operation_id, input_key, method, message, state) VALUES ($1, 'qm', 'elicitation/create', 'Split the refund?', 'moved_on')`, "moved"},
	} {
		if _, err := e.pool.Exec(ctx, q.sql, ops[q.op]); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	snake := regexp.MustCompile(`\b[a-z]+_[a-z_]+\b`)
	for k, id := range ops {
		_, page := e.do(t, "operator", "GET", "/operations/"+id, nil)
		loud := testidText(page, "moved-on", "div")
		if loud == "" || !strings.Contains(page, `class="flash bad" data-testid="moved-on"`) || countOf(loud, "unanswered") != 1 {
			t.Errorf("%s: no loud notice on the operation:\n%s", k, loud)
		}
		if m := snake.FindString(sliceAfterAll(loud, ">")); m != "" {
			t.Errorf("%s: the notice says %q in code form", k, m)
		}
		if has(page, "input-form") {
			t.Errorf("%s: the operation offers a form for a question nobody can answer", k)
		}
	}
	_, inbox := e.do(t, "operator", "GET", "/inbox", nil)
	for _, q := range testidAll(inbox, "inbox-question", "li") {
		if !has(q, "inbox-stale") || has(q, "input-form") {
			t.Errorf("an open question nobody can answer is not marked, or offers a form:\n%s", q)
		}
	}
	if n := countOf(inbox, "inbox-question"); n != 2 {
		t.Errorf("%d open questions in the inbox, want the two still open", n)
	}
	if !strings.Contains(inbox, "Too late to answer: the question expired at") {
		t.Errorf("the question past its deadline does not say so")
	}
	moved := testidText(inbox, "inbox-moved-on", "section")
	for _, msg := range []string{"Which account?", "Split the refund?"} {
		if !strings.Contains(moved, msg) {
			t.Errorf("the inbox does not list %q among the questions left without an answer", msg)
		}
	}
}
