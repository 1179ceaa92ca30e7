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

// Overview reads the overview for scope over the last window.
func (s *Store) Overview(ctx context.Context, scope Scope, window time.Duration) (Overview, error) {
	hours := max(1, int(window/time.Hour))
	ov := Overview{InFlight: map[string]int{}, InputRequired: map[string]int{}, OpenReconciliation: map[string]int{},
		Cells: []MatrixCell{}, Violations: []RecentViolation{}}
	all, tenants := scope.All, scope.Tenants
	if tenants == nil {
		tenants = []string{}
	}
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
	b.Queue(`SELECT v.task_id, v.from_state, v.to_state, v.source, v.observed_at, v.kind, v.detail, o.id, o.tenant, o.workflow
		FROM transition_violations v JOIN operations o ON o.id = v.operation_id
		WHERE ($1 OR o.tenant = ANY($2)) AND v.observed_at > now() - $3 * interval '1 hour'
		ORDER BY v.observed_at DESC, v.id DESC LIMIT 10`, all, tenants, hours).Query(func(rows pgx.Rows) error {
		var err error
		ov.Violations, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (RecentViolation, error) {
			var v RecentViolation
			return v, r.Scan(&v.TaskID, &v.From, &v.To, &v.Source, &v.ObservedAt, &v.Kind, &v.Detail, &v.OperationID, &v.Tenant, &v.Workflow)
		})
		return err
	})
	b.Queue(`SELECT count(*) FROM transition_violations v JOIN operations o ON o.id = v.operation_id
		WHERE ($1 OR o.tenant = ANY($2)) AND v.observed_at > now() - $3 * interval '1 hour'`, all, tenants, hours).QueryRow(func(row pgx.Row) error {
		return row.Scan(&ov.ViolationsInWindow)
	})
	b.Queue(`WITH h AS (SELECT generate_series(date_trunc('hour', now()) - ($3 - 1) * interval '1 hour', date_trunc('hour', now()), interval '1 hour') AS start)
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
		ov.Hours, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (HourBucket, error) {
			var h HourBucket
			return h, r.Scan(&h.Start, &h.Starts, &h.Terminal, &h.Unknown)
		})
		return err
	})
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return Overview{}, fmt.Errorf("overview: %w", err)
	}
	if ov.Cells == nil {
		ov.Cells = []MatrixCell{}
	}
	if ov.Violations == nil {
		ov.Violations = []RecentViolation{}
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
