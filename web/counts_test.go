package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/operations"
)

// listTotal is the real total the list at href shows ("Showing N of T"), 0 for an empty list.
func listTotal(t *testing.T, e *opsEnv, who, href string) int {
	t.Helper()
	if strings.HasPrefix(href, "#") {
		_, body := e.do(t, who, "GET", "/", nil)
		return countIn(t, body, "violations-count", "violations-empty", href)
	}
	_, body := e.do(t, who, "GET", href, nil)
	switch {
	case strings.HasPrefix(href, "/operations"):
		return countIn(t, body, "ops-count", "empty", href)
	case strings.HasPrefix(href, "/reconcile"):
		return countIn(t, body, "queue-count", "empty", href)
	case strings.HasPrefix(href, "/inbox"):
		return countIn(t, body, "inbox-count", "", href)
	}
	t.Fatalf("no list behind %s", href)
	return 0
}

// countIn reads T of "Showing N of T" in the element with test id counted, or 0 when the element
// with test id none (the list's empty state) is there instead.
func countIn(t *testing.T, body, counted, none, href string) int {
	t.Helper()
	seg := testidText(body, counted, "p")
	if seg == "" {
		if none != "" && has(body, none) {
			return 0
		}
		t.Fatalf("%s shows no count:\n%.3000s", href, body)
	}
	m := regexp.MustCompile(`Showing (\d+) of (\d+)`).FindStringSubmatch(seg)
	if m == nil {
		t.Fatalf("%s: count %q", href, seg)
	}
	n, _ := strconv.Atoi(m[2])
	return n
}

// TestEveryOverviewNumberIsItsListsTotal: every number on the overview that links to a list —
// each tile, each workflow's in-flight, question and reconciliation count, each cell of the
// task state × outcome matrix — equals the real total of the list it links to, for an account
// of every tenant and one of a single tenant, on a database seeded with operations in many
// states, some old, some of another tenant.
func TestEveryOverviewNumberIsItsListsTotal(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	ctx := context.Background()
	var acme []string
	for i := range 8 {
		acme = append(acme, e.start(t, "acme", "refund", fmt.Sprintf("ov-%d", i), `{"outcome": "hang"}`))
	}
	globex := e.start(t, "globex", "refund", "ov-g", `{"outcome": "hang"}`)
	handoff := e.start(t, "acme", "kyc", "ov-h", `{}`)
	e.start(t, "globex", "kyc", "ov-hg", `{}`)
	for _, q := range []string{
		// Done, in the window: completed, completed with a tool error, failed but applied.
		`UPDATE tasks SET state = 'completed', terminal_at = now() WHERE operation_id = '` + acme[0] + `'`,
		`UPDATE operations SET domain_outcome = 'applied' WHERE id = '` + acme[0] + `'`,
		`UPDATE tasks SET state = 'completed', tool_error = true, terminal_at = now() WHERE operation_id = '` + acme[1] + `'`,
		`UPDATE operations SET domain_outcome = 'not_applied' WHERE id = '` + acme[1] + `'`,
		`UPDATE tasks SET state = 'failed', terminal_at = now() WHERE operation_id = '` + acme[2] + `'`,
		`UPDATE operations SET domain_outcome = 'applied' WHERE id = '` + acme[2] + `'`,
		// Done long ago: outside the matrix's window, in no tile.
		`UPDATE tasks SET state = 'completed', terminal_at = now() - interval '3 days' WHERE operation_id = '` + acme[3] + `'`,
		`UPDATE operations SET domain_outcome = 'applied', created_at = now() - interval '3 days' WHERE id = '` + acme[3] + `'`,
		// Old but still open: counted.
		`UPDATE operations SET created_at = now() - interval '2 days' WHERE id = '` + acme[4] + `'`,
		// A question waiting.
		`UPDATE tasks SET state = 'input_required' WHERE operation_id = '` + acme[5] + `'`,
		`INSERT INTO pending_inputs (operation_id, input_key, method, message) VALUES ('` + acme[5] + `', 'q', 'elicitation/create', 'Approve?')`,
		// Unknown with an item, old: the attention flag keeps it in the matrix.
		`UPDATE tasks SET state = 'unobservable', terminal_at = now() - interval '2 days' WHERE operation_id = '` + acme[6] + `'`,
		`UPDATE operations SET domain_outcome = 'unknown', attention = 'needs_reconciliation', attention_reason = 'task_unobservable',
			created_at = now() - interval '2 days' WHERE id = '` + acme[6] + `'`,
		`INSERT INTO reconciliation_items (operation_id, reason, tenant, workflow, state) VALUES ('` + acme[6] + `', 'task_unobservable', 'acme', 'refund', 'needs_person')`,
		// A transition violation in the window and one before it.
		`INSERT INTO transition_violations (operation_id, task_id, from_state, to_state, source) VALUES ('` + acme[0] + `', 't', 'completed', 'working', 'poll')`,
		`INSERT INTO transition_violations (operation_id, task_id, from_state, to_state, source, observed_at) VALUES ('` + globex + `', 't', 'completed', 'working', 'poll', now() - interval '2 days')`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if d := e.b.Detail(t, handoff); d.Task != nil || !d.NeedsPerson {
		t.Fatalf("the handoff has a task or needs nobody: %+v", d.Operation)
	}
	linked := regexp.MustCompile(`<a href="([^"]+)"(?: data-testid="([^"]+)")?>(\d+)</a>`)
	tiles := regexp.MustCompile(`href="([^"]+)" data-testid="(tile-[a-z]+)"[^>]*>\s*<div class="label">[^<]*</div>\s*<div class="value">(\d+)</div>`)
	for _, who := range []string{"viewer", "acme-viewer"} {
		_, home := e.do(t, who, "GET", "/", nil)
		var numbers [][]string
		numbers = append(numbers, tiles.FindAllStringSubmatch(home, -1)...)
		for _, part := range []string{testidText(home, "overview-workflows", "table"), testidText(home, "matrix", "table")} {
			numbers = append(numbers, linked.FindAllStringSubmatch(part, -1)...)
		}
		kinds := map[string]int{}
		for _, m := range numbers {
			href, n := html.UnescapeString(m[1]), m[3]
			kind := m[2]
			if kind == "" {
				kind = "matrix-cell"
			}
			kinds[kind]++
			if got := listTotal(t, e, who, href); strconv.Itoa(got) != n {
				t.Errorf("%s: %s says %s, the list at %s holds %d", who, kind, n, href, got)
			}
		}
		// Every kind of number was checked, and the seeded states reached the matrix.
		for _, k := range []string{"tile-person", "tile-questions", "tile-inflight", "tile-recon", "tile-mismatch", "tile-violations", "wf-inflight", "wf-input", "wf-recon"} {
			if kinds[k] == 0 {
				t.Errorf("%s: no %s number found on the overview", who, k)
			}
		}
		if kinds["matrix-cell"] < 6 {
			t.Errorf("%s: only %d matrix cells with a count", who, kinds["matrix-cell"])
		}
	}
	// The scoped account's numbers are its own tenant's: the globex handoff is nowhere in them.
	page, err := e.b.Ops.List(ctx, operations.Scope{Tenants: []string{"acme"}}, operations.Filter{Attention: true})
	if err != nil {
		t.Fatal(err)
	}
	_, home := e.do(t, "acme-viewer", "GET", "/", nil)
	if got := tileValue(t, home, "tile-person"); got != strconv.Itoa(page.Total) {
		t.Errorf("acme-viewer: needs-a-person tile %s, acme's list %d", got, page.Total)
	}
}

// TestNeedsAPersonTotalsPastAPage: with more operations needing a person than a page holds, the
// tile, the overview's list, the operations list, the API and the reconciliation queue all say
// the real total ("showing 50 of 55"), never the size of a page.
func TestNeedsAPersonTotalsPastAPage(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	for i := range 55 {
		e.start(t, "acme", "kyc", fmt.Sprintf("many-%d", i), `{}`)
	}
	for i := range 3 {
		e.start(t, "globex", "kyc", fmt.Sprintf("many-g-%d", i), `{}`)
	}
	for _, c := range []struct {
		who, token string
		total      int
	}{{"acme-viewer", "acme-token", 55}, {"viewer", "", 58}} {
		_, home := e.do(t, c.who, "GET", "/", nil)
		if got := tileValue(t, home, "tile-person"); got != strconv.Itoa(c.total) {
			t.Errorf("%s: tile %s, want %d", c.who, got, c.total)
		}
		if got := tileValue(t, home, "tile-recon"); got != strconv.Itoa(c.total) {
			t.Errorf("%s: reconciliation tile %s, want %d", c.who, got, c.total)
		}
		if seg := testidText(home, "person-count", "p"); !strings.Contains(seg, fmt.Sprintf("Showing 10 of %d", c.total)) {
			t.Errorf("%s: overview list says %q", c.who, seg)
		}
		_, list := e.do(t, c.who, "GET", "/operations?attention=true", nil)
		if seg := testidText(list, "ops-count", "p"); !strings.Contains(seg, fmt.Sprintf("Showing 50 of %d", c.total)) || countOf(list, "op-row") != 50 {
			t.Errorf("%s: list says %q with %d rows", c.who, seg, countOf(list, "op-row"))
		}
		_, queue := e.do(t, c.who, "GET", "/reconcile", nil)
		if seg := testidText(queue, "queue-count", "p"); !strings.Contains(seg, fmt.Sprintf("Showing 50 of %d", c.total)) {
			t.Errorf("%s: queue says %q", c.who, seg)
		}
		if c.token == "" {
			continue
		}
		_, body := e.apiDo(t, c.token, "GET", "/api/v1/operations?attention=true", "", nil)
		var page operations.Page
		if err := json.Unmarshal([]byte(body), &page); err != nil || page.Total != c.total || len(page.Operations) != 50 || page.Next == "" {
			t.Errorf("%s: API total %d, %d operations, next %q (%v)", c.who, page.Total, len(page.Operations), page.Next, err)
		}
	}
}
