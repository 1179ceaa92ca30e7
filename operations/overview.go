package operations

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Overview is the on-call picture of the ledger within a tenant scope: counts of task state ×
// domain outcome per workflow, what is in flight, what waits for a person, recent transition
// violations and hourly activity.
type Overview struct {
	// Cells count operations by workflow, route, task state ("" off the Task route) and domain
	// outcome: those started within the window and every one still open (task not final, or
	// waiting for a person).
	Cells []MatrixCell `json:"cells"`
	// InFlight counts non-terminal tasks (creating, working, input_required) by workflow: what a
	// kill switch would leave draining.
	InFlight map[string]int `json:"in_flight"`
	// InputRequired counts tasks waiting for an answer by workflow.
	InputRequired map[string]int `json:"input_required"`
	// OpenReconciliation counts open reconciliation items by workflow.
	OpenReconciliation map[string]int `json:"open_reconciliation"`
	// Violations are the most recent transition violations, newest first.
	Violations []RecentViolation `json:"violations"`
	// ViolationsInWindow counts transition violations within the window.
	ViolationsInWindow int `json:"violations_in_window"`
	// Hours are hourly buckets, oldest first, ending with the current hour.
	Hours []HourBucket `json:"hours"`
}

// MatrixCell is one count of the overview's matrix.
type MatrixCell struct {
	Workflow  string    `json:"workflow"`
	Route     Route     `json:"route"`
	TaskState TaskState `json:"task_state,omitempty"`
	ToolError bool      `json:"tool_error,omitempty"`
	Outcome   Outcome   `json:"domain_outcome"`
	Count     int       `json:"count"`
}

// Mismatch reports a cell whose task state and domain outcome disagree (see Operation.Mismatch).
func (c MatrixCell) Mismatch() bool {
	return c.TaskState != "" && Mismatch(c.TaskState, c.ToolError, c.Outcome)
}

// RecentViolation is a transition violation with the operation it belongs to.
type RecentViolation struct {
	Violation
	OperationID string `json:"operation_id"`
	Tenant      string `json:"tenant"`
	Workflow    string `json:"workflow"`
}

// HourBucket is one hour of activity.
type HourBucket struct {
	// Start is the start of the hour (UTC).
	Start time.Time `json:"start"`
	// Starts counts operations started, Terminal operations whose work ended (a task that
	// reached a final state, or a synchronous call that answered), Unknown reconciliation items
	// opened (an outcome Taskgate could not tell).
	Starts   int `json:"starts"`
	Terminal int `json:"terminal"`
	Unknown  int `json:"unknown"`
}

// Overview returns the overview for scope over the last window (at least an hour), with hourly
// buckets.
func (s *Service) Overview(ctx context.Context, scope Scope, window time.Duration) (Overview, error) {
	return s.cfg.Store.Overview(ctx, scope, window)
}

// Overview reads the overview for scope over the last window: from the counters once they hold
// the whole ledger (counters.go), otherwise by aggregating the ledger (overviewDirect). Either
// way the parts are read in one snapshot.
func (s *Store) Overview(ctx context.Context, scope Scope, window time.Duration) (Overview, error) {
	hours := max(1, int(window/time.Hour))
	counted, err := s.overviewCounted(ctx)
	if err != nil {
		return Overview{}, err
	}
	var ov Overview
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		if counted {
			ov, err = overviewCounted(ctx, tx, scope, hours, edgeSplit)
		} else {
			ov, err = overviewDirect(ctx, tx, scope, hours)
		}
		return err
	})
	return ov, err
}

func newOverview() Overview {
	return Overview{InFlight: map[string]int{}, InputRequired: map[string]int{}, OpenReconciliation: map[string]int{},
		Cells: []MatrixCell{}, Violations: []RecentViolation{}}
}

func scopeArgs(scope Scope) (bool, []string) {
	if scope.Tenants == nil {
		return scope.All, []string{}
	}
	return scope.All, scope.Tenants
}

// overviewDirect aggregates the overview over the ledger: what the counters must equal (the
// tests hold them to it), and the read until the counters hold the whole ledger.
func overviewDirect(ctx context.Context, q pgx.Tx, scope Scope, hours int) (Overview, error) {
	ov := newOverview()
	all, tenants := scopeArgs(scope)
	b := &pgx.Batch{}
	b.Queue(`SELECT o.workflow, o.route, coalesce(t.state, ''), coalesce(t.tool_error, false), o.domain_outcome, count(*)
		FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id
		WHERE ($1 OR o.tenant = ANY($2)) AND `+fmt.Sprintf(RecentSQL, "$3")+`
		GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5`, all, tenants, hours).Query(func(rows pgx.Rows) error {
		var err error
		ov.Cells, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (MatrixCell, error) {
			var c MatrixCell
			return c, r.Scan(&c.Workflow, &c.Route, &c.TaskState, &c.ToolError, &c.Outcome, &c.Count)
		})
		return err
	})
	b.Queue(`SELECT o.workflow, count(*), count(*) FILTER (WHERE t.state = 'input_required')
		FROM tasks t JOIN operations o ON o.id = t.operation_id
		WHERE ($1 OR o.tenant = ANY($2)) AND `+InFlightSQL+` GROUP BY 1`, all, tenants).Query(func(rows pgx.Rows) error {
		var wf string
		var n, in int
		_, err := pgx.ForEachRow(rows, []any{&wf, &n, &in}, func() error {
			ov.InFlight[wf], ov.InputRequired[wf] = n, in
			return nil
		})
		return err
	})
	// Open items by the item's own tenant and workflow, as the queue filters them.
	b.Queue(`SELECT ri.workflow, count(*) FROM reconciliation_items ri
		WHERE ($1 OR ri.tenant = ANY($2)) AND ri.closed_at IS NULL GROUP BY 1`, all, tenants).Query(func(rows pgx.Rows) error {
		var wf string
		var n int
		_, err := pgx.ForEachRow(rows, []any{&wf, &n}, func() error {
			ov.OpenReconciliation[wf] = n
			return nil
		})
		return err
	})
	queueViolations(b, &ov, all, tenants, hours)
	b.Queue(`WITH h AS (SELECT generate_series(date_trunc('hour', now(), 'UTC') - ($3 - 1) * interval '1 hour', date_trunc('hour', now(), 'UTC'), interval '1 hour') AS start)
		SELECT h.start,
			(SELECT count(*) FROM operations o WHERE ($1 OR o.tenant = ANY($2)) AND o.created_at >= h.start AND o.created_at < h.start + interval '1 hour'),
			(SELECT count(*) FROM tasks t JOIN operations o ON o.id = t.operation_id WHERE ($1 OR o.tenant = ANY($2))
				AND t.terminal_at >= h.start AND t.terminal_at < h.start + interval '1 hour')
			+ (SELECT count(*) FROM task_envelopes e JOIN operations o ON o.id = e.operation_id WHERE ($1 OR o.tenant = ANY($2))
				AND e.finished_at >= h.start AND e.finished_at < h.start + interval '1 hour'
				AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.operation_id = e.operation_id)),
			(SELECT count(*) FROM reconciliation_items ri JOIN operations o ON o.id = ri.operation_id WHERE ($1 OR o.tenant = ANY($2))
				AND ri.opened_at >= h.start AND ri.opened_at < h.start + interval '1 hour')
		FROM h ORDER BY h.start`, all, tenants, hours).Query(func(rows pgx.Rows) error {
		var err error
		ov.Hours, err = collectHours(rows)
		return err
	})
	if err := q.SendBatch(ctx, b).Close(); err != nil {
		return Overview{}, fmt.Errorf("overview: %w", err)
	}
	return ov, nil
}

// queueViolations adds the recent violations and their count in the window (few rows: read
// from the ledger either way).
func queueViolations(b *pgx.Batch, ov *Overview, all bool, tenants []string, hours int) {
	b.Queue(`SELECT v.task_id, v.from_state, v.to_state, v.source, v.observed_at, v.kind, v.detail, o.id, o.tenant, o.workflow
		FROM transition_violations v JOIN operations o ON o.id = v.operation_id
		WHERE ($1 OR o.tenant = ANY($2)) AND v.observed_at > now() - $3 * interval '1 hour'
		ORDER BY v.observed_at DESC, v.id DESC LIMIT 10`, all, tenants, hours).Query(func(rows pgx.Rows) error {
		vs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RecentViolation, error) {
			var v RecentViolation
			return v, r.Scan(&v.TaskID, &v.From, &v.To, &v.Source, &v.ObservedAt, &v.Kind, &v.Detail, &v.OperationID, &v.Tenant, &v.Workflow)
		})
		if vs != nil {
			ov.Violations = vs
		}
		return err
	})
	b.Queue(`SELECT count(*) FROM transition_violations v JOIN operations o ON o.id = v.operation_id
		WHERE ($1 OR o.tenant = ANY($2)) AND v.observed_at > now() - $3 * interval '1 hour'`, all, tenants, hours).QueryRow(func(row pgx.Row) error {
		return row.Scan(&ov.ViolationsInWindow)
	})
}

func collectHours(rows pgx.Rows) ([]HourBucket, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (HourBucket, error) {
		var h HourBucket
		return h, r.Scan(&h.Start, &h.Starts, &h.Terminal, &h.Unknown)
	})
}

// overviewCountedSQL reads the matrix, the per-workflow load and the hourly chart from the
// counters and the operations still dirty ($1 all, $2 tenants, $3 hours, $4 the edge split),
// one row per matrix cell ('m'), workflow ('l') and hour ('h'), in one statement so the dirty
// operations' facts are read and planned once.
//
// An open operation (task in an open state, or attention set) is in the matrix whenever it
// started: its cells are overview_totals'. One not open is in it when it started within the
// window (from, now]: overview_created by the hour it started, for the hours after the window's
// first, partial hour, plus that hour's part inside the window read from overview_ops by its
// start; or, when the window starts less than $4 into that hour, the whole hour less its part
// before the window: at most half an hour of operations either way.
var overviewCountedSQL = `WITH ` + pendCTE + `,
	w AS (SELECT now() - $3 * interval '1 hour' AS win, date_trunc('hour', now() - $3 * interval '1 hour', 'UTC') AS first,
		date_trunc('hour', now(), 'UTC') AS last),
	e AS (SELECT CASE WHEN win - first <= $4 THEN first ELSE first + interval '1 hour' END AS hours_from,
		CASE WHEN win - first <= $4 THEN -1 ELSE 1 END AS sign,
		CASE WHEN win - first <= $4 THEN first ELSE win + interval '1 microsecond' END AS lo,
		CASE WHEN win - first <= $4 THEN win + interval '1 microsecond' ELSE first + interval '1 hour' END AS hi FROM w),
	m AS (SELECT workflow, route, task_state, tool_error, outcome, sum(n)::bigint AS n FROM (
		SELECT workflow, route, task_state, tool_error, outcome, ops AS n FROM overview_totals
			WHERE ($1 OR tenant = ANY($2)) AND (task_state IN ` + openStatesSQL + ` OR attention)
		UNION ALL SELECT workflow, route, task_state, tool_error, outcome, sign FROM pend
			WHERE task_state IN ` + openStatesSQL + ` OR attention
		UNION ALL SELECT workflow, route, task_state, tool_error, outcome, ops FROM overview_created
			WHERE ($1 OR tenant = ANY($2)) AND hour >= (SELECT hours_from FROM e)
		UNION ALL SELECT workflow, route, task_state, tool_error, outcome, sign FROM pend
			WHERE NOT (task_state IN ` + openStatesSQL + ` OR attention) AND date_trunc('hour', created_at, 'UTC') >= (SELECT hours_from FROM e)
		UNION ALL SELECT workflow, route, task_state, tool_error, outcome, (SELECT sign FROM e) FROM overview_ops
			WHERE ($1 OR tenant = ANY($2)) AND created_at >= (SELECT lo FROM e) AND created_at < (SELECT hi FROM e)
			  AND NOT (task_state IN ` + openStatesSQL + ` OR attention)
		UNION ALL SELECT workflow, route, task_state, tool_error, outcome, (SELECT sign FROM e) * sign FROM pend
			WHERE created_at >= (SELECT lo FROM e) AND created_at < (SELECT hi FROM e) AND NOT (task_state IN ` + openStatesSQL + ` OR attention)
		) x GROUP BY 1, 2, 3, 4, 5 HAVING sum(n) <> 0),
	l AS (SELECT workflow, coalesce(sum(n) FILTER (WHERE task_state IN ` + openStatesSQL + `), 0)::bigint AS in_flight,
		coalesce(sum(n) FILTER (WHERE task_state = 'input_required'), 0)::bigint AS input, coalesce(sum(r), 0)::bigint AS open FROM (
		SELECT workflow, task_state, ops AS n, ri_open AS r FROM overview_totals WHERE ($1 OR tenant = ANY($2))
		UNION ALL SELECT workflow, task_state, sign, CASE WHEN ri_open THEN sign ELSE 0 END FROM pend) x
		GROUP BY workflow),
	ph AS (` + hourlyOf("pend") + `),
	h AS (SELECT h.start, coalesce(sum(x.starts), 0)::bigint AS starts, coalesce(sum(x.ended), 0)::bigint AS ended,
		coalesce(sum(x.unknown), 0)::bigint AS unknown
		FROM generate_series((SELECT last FROM w) - ($3 - 1) * interval '1 hour', (SELECT last FROM w), interval '1 hour') AS h(start)
		LEFT JOIN (SELECT hour, starts, ended, unknown FROM overview_hourly
				WHERE ($1 OR tenant = ANY($2)) AND hour >= (SELECT last FROM w) - ($3 - 1) * interval '1 hour'
			UNION ALL SELECT hour, starts, ended, unknown FROM ph) x ON x.hour = h.start
		GROUP BY h.start)
	SELECT 'm', workflow, route, task_state, tool_error, outcome, NULL::timestamptz, n, 0::bigint, 0::bigint FROM m
	UNION ALL SELECT 'l', workflow, '', '', false, '', NULL, in_flight, input, open FROM l
	UNION ALL SELECT 'h', '', '', '', false, '', start, starts, ended, unknown FROM h
	ORDER BY 1, 2, 3, 4, 5, 6, 7`

// edgeSplit is where in the window's first hour the matrix stops adding the hour's part inside
// the window and subtracts the part before it instead.
const edgeSplit = 30 * time.Minute

// overviewCounted reads the overview from the counters, adding what the operations still
// dirty change, in tx's snapshot (repeatable read). split is edgeSplit (tests move it to take
// each way through the first hour).
func overviewCounted(ctx context.Context, tx pgx.Tx, scope Scope, hours int, split time.Duration) (Overview, error) {
	ov := newOverview()
	all, tenants := scopeArgs(scope)
	b := &pgx.Batch{}
	b.Queue(overviewCountedSQL, all, tenants, hours, split).Query(func(rows pgx.Rows) error {
		var part, wf, route, state, outcome string
		var toolError bool
		var hour *time.Time
		var a, bb, c int
		_, err := pgx.ForEachRow(rows, []any{&part, &wf, &route, &state, &toolError, &outcome, &hour, &a, &bb, &c}, func() error {
			switch part {
			case "m":
				ov.Cells = append(ov.Cells, MatrixCell{Workflow: wf, Route: Route(route), TaskState: TaskState(state), ToolError: toolError,
					Outcome: Outcome(outcome), Count: a})
			case "l":
				if a > 0 {
					ov.InFlight[wf], ov.InputRequired[wf] = a, bb
				}
				if c > 0 {
					ov.OpenReconciliation[wf] = c
				}
			case "h":
				ov.Hours = append(ov.Hours, HourBucket{Start: *hour, Starts: a, Terminal: bb, Unknown: c})
			}
			return nil
		})
		return err
	})
	queueViolations(b, &ov, all, tenants, hours)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return Overview{}, fmt.Errorf("overview: %w", err)
	}
	return ov, nil
}

// ArgumentNames lists the names of the operation's arguments, sorted; the values are kept for
// the call and never served.
func (o Operation) ArgumentNames() []string {
	var m map[string]any
	_ = json.Unmarshal(o.arguments, &m)
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
