package operations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/migrations"
	"github.com/taskgate/taskgate/operations"
)

// The timeline's source column admits every source the code writes and no other, and only a
// person's line names a person.
func TestTimelineAdmitsEverySourceAndAPersonOnlyOnAPersonsLine(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	id := insertOperation(t, pool, "src-1")
	for _, src := range operations.TimelineSources() {
		if _, err := pool.Exec(ctx, `INSERT INTO task_timeline (operation_id, source, state) VALUES ($1, $2, 'x')`, id, src); err != nil {
			t.Errorf("source %s refused: %v", src, err)
		}
	}
	for _, bad := range []struct{ source, actor string }{{"person", ""}, {"server", ""}, {"verifier", "alice"}, {"poll", "alice"}} {
		var actor any
		if bad.actor != "" {
			actor = bad.actor
		}
		if _, err := pool.Exec(ctx, `INSERT INTO task_timeline (operation_id, source, actor, state) VALUES ($1, $2, $3, 'x')`, id, bad.source, actor); err == nil {
			t.Errorf("source %q with actor %q admitted", bad.source, bad.actor)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO task_timeline (operation_id, source, actor, state) VALUES ($1, 'operator', 'alice', 'x')`, id); err != nil {
		t.Errorf("a person's line refused: %v", err)
	}
}

func insertOperation(t *testing.T, pool *pgxpool.Pool, key string) string {
	t.Helper()
	var id string
	if err := pool.QueryRow(context.Background(), `INSERT INTO operations (tenant, workflow, idempotency_key, request_sha256, actor, route, reason_code, reason)
		VALUES ('acme', 'refund', $1, 'x', 'app', 'task', 'task_full', 'full') RETURNING id`, key).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Migration 00023 names the sources of lines written before it where they can be told apart
// (the verifier's checks, the server's replies to a cancel, a refused answer), puts each
// person's name in its own column, keeps on each operation why its work failed, from the
// envelope or the failed job, and closes the handoffs whose work was settled; the down migration
// puts every line back under a source 00004 admits.
func TestMigrationNamesTheSourcesOfOldLines(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	runner, err := migrations.NewRunner(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer runner.Close()
	// Down to the schema before 00023, whatever came after it.
	downTo22 := func() {
		t.Helper()
		for {
			var version int64
			if err := pool.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version WHERE is_applied`).Scan(&version); err != nil {
				t.Fatal(err)
			}
			if version == 22 {
				return
			}
			if version < 22 {
				t.Fatalf("stepping down went past 00022 to %d", version)
			}
			if _, err := runner.Down(ctx, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	downTo22()
	tool, server, quiet, job, fine := insertOperation(t, pool, "m-1"), insertOperation(t, pool, "m-2"), insertOperation(t, pool, "m-3"),
		insertOperation(t, pool, "m-4"), insertOperation(t, pool, "m-5")
	settled, waiting := insertOperation(t, pool, "m-6"), insertOperation(t, pool, "m-7")
	long := strings.Repeat("é", 250)
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO task_envelopes (operation_id, status, era, tool_error, preview, status_message) VALUES
			($1, 'completed', 'e', true, E'\n  declined by the system of record  \nsecond line', 'done'),
			($2, 'failed', 'e', false, '', E'  \n' || $5 || E'\nmore'),
			($3, 'failed', 'e', false, E' \n ', E'\t'),
			($4, 'completed', 'e', false, 'all good', '')`, []any{tool, server, quiet, fine, long}},
		{`INSERT INTO job_runs (operation_id, base_url, status, error) VALUES ($1, 'http://jobs', 'failed', '  card expired ')`, []any{job}},
		// Two handoffs: one resolved by a person (its outcome settled), one still waiting.
		{`INSERT INTO handoff_items (operation_id) VALUES ($1), ($2)`, []any{settled, waiting}},
		{`INSERT INTO reconciliation_items (operation_id, reason, tenant, workflow, state, closed_at) VALUES
			($1, 'human_handoff', 'acme', 'refund', 'resolved', now() - interval '1 hour'),
			($2, 'human_handoff', 'acme', 'refund', 'needs_person', NULL)`, []any{settled, waiting}},
		{`UPDATE operations SET domain_outcome = CASE WHEN id = $1 THEN 'applied' ELSE 'unknown' END WHERE id IN ($1, $2)`, []any{settled, waiting}},
		{`INSERT INTO task_timeline (operation_id, source, state, message) VALUES
			($1, 'create', 'creating', 'task creation sent'),
			($1, 'poll', 'working', ''),
			($1, 'operator', 'cancel_requested', 'cancel requested by ops@x.test: customer: withdrew'),
			($1, 'operator', 'cancel_acknowledged', 'the server acknowledged the cancel request'),
			($1, 'operator', 'cancelled', ''),
			($1, 'poll', 'cancel_refused', 'the task was already completed'),
			($1, 'watcher', 'cancel_unanswered', 'cancel request failed: timeout'),
			($1, 'operator', 'input_answered', 'input q1 answered (accept) by sup port@x.test'),
			($1, 'operator', 'input_refused', 'answer to input q1 (accept) by sup port@x.test not taken: gone'),
			($1, 'operator', 'retry', 'retry requested by lead@x.test after not_applied; same idempotency key'),
			($1, 'operator', 'reconciled', 'resolved not_applied by lead@x.test (paid (bank) twice)'),
			($1, 'operator', 'verified', 'verifier (http): applied'),
			($1, 'watcher', 'no_effect_to_verify', 'no effect to verify'),
			($1, 'watcher', 'input_requested', 'the server asks'),
			($1, 'operator', 'note', 'something by nobody we know')`, []any{tool}},
	} {
		if _, err := pool.Exec(ctx, q.sql, q.args...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if _, err := runner.Up(ctx); err != nil {
		t.Fatal(err)
	}
	lines := func() string {
		rows, err := pool.Query(ctx, `SELECT state || '=' || source || coalesce('/' || actor, '') FROM task_timeline WHERE operation_id = $1 ORDER BY id`, tool)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	want := "creating=create working=poll cancel_requested=operator/ops@x.test cancel_acknowledged=cancel_reply cancelled=cancel_reply " +
		"cancel_refused=cancel_reply cancel_unanswered=cancel_reply input_answered=operator/sup port@x.test input_refused=answer_reply " +
		"retry=operator/lead@x.test reconciled=operator/lead@x.test verified=verifier no_effect_to_verify=verifier input_requested=watcher note=operator"
	if got := lines(); got != want {
		t.Errorf("after 00023:\n got %s\nwant %s", got, want)
	}
	reasons := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, coalesce(failure_reason_by || ': ' || failure_reason, '-') FROM operations`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k, r string
		if err := rows.Scan(&k, &r); err != nil {
			t.Fatal(err)
		}
		reasons[k] = r
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	// The same words the code keeps for an envelope recorded now.
	longReason, _ := operations.Envelope{Status: "failed", StatusMessage: "  \n" + long + "\nmore"}.FailureReason()
	for k, w := range map[string]string{"m-1": "tool: declined by the system of record", "m-2": "server: " + longReason,
		"m-3": "-", "m-4": "job_api: card expired", "m-5": "-"} {
		if reasons[k] != w {
			t.Errorf("%s: failure reason %q, want %q", k, reasons[k], w)
		}
	}
	if !strings.HasSuffix(longReason, "…") || len([]rune(longReason)) != 201 {
		t.Errorf("a long reason is not cut at 200 characters: %d", len([]rune(longReason)))
	}
	// The settled handoff is closed when its item closed; the waiting one stays open.
	var closedSettled, closedWaiting bool
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT h.closed_at = r.closed_at FROM handoff_items h JOIN reconciliation_items r USING (operation_id) WHERE h.operation_id = $1),
		(SELECT closed_at IS NOT NULL FROM handoff_items WHERE operation_id = $2)`, settled, waiting).Scan(&closedSettled, &closedWaiting); err != nil {
		t.Fatal(err)
	}
	if !closedSettled || closedWaiting {
		t.Errorf("handoffs after 00023: settled one closed with its item %v, waiting one closed %v", closedSettled, closedWaiting)
	}

	downTo22()
	want = "creating=create working=poll cancel_requested=operator cancel_acknowledged=poll cancelled=poll " +
		"cancel_refused=poll cancel_unanswered=watcher input_answered=operator input_refused=operator " +
		"retry=operator reconciled=operator verified=watcher no_effect_to_verify=watcher input_requested=watcher note=operator"
	var got string
	if err := pool.QueryRow(ctx, `SELECT string_agg(state || '=' || source, ' ' ORDER BY id) FROM task_timeline WHERE operation_id = $1`, tool).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("after 00023 down:\n got %s\nwant %s", got, want)
	}
	if _, err := runner.Up(ctx); err != nil {
		t.Fatal(fmt.Errorf("up again: %w", err))
	}
}
