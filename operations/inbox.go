package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/reconcile"
)

// NeedsPersonSQL is the one definition of "needs a person", as a condition on an operation o:
// an open question (an input request not yet answered, or a task waiting for input), an open
// reconciliation item, or an open handoff. The overview's tile, the operations list and its
// filter, the inbox and the API all count with it.
const NeedsPersonSQL = `(EXISTS (SELECT 1 FROM pending_inputs pi WHERE pi.operation_id = o.id AND pi.state = 'open')
	OR EXISTS (SELECT 1 FROM tasks ti WHERE ti.operation_id = o.id AND ti.state = 'input_required')
	OR EXISTS (SELECT 1 FROM reconciliation_items ri WHERE ri.operation_id = o.id AND ri.closed_at IS NULL)
	OR EXISTS (SELECT 1 FROM handoff_items hi WHERE hi.operation_id = o.id AND hi.closed_at IS NULL))`

// InFlightSQL is the condition "the task is still open" on a task t: creating, working or
// waiting for input. The overview's "in flight" counts and the list's in-flight filter use it.
const InFlightSQL = `t.state IN ('creating', 'working', 'input_required')`

// RecentSQL is what the overview's matrix counts, as a condition on an operation o joined with
// its task t; %s is the window in hours (a parameter): started within the window, or still
// open, or marked for attention. The list's Window filter uses the same condition, so each cell
// links to the operations it counts.
const RecentSQL = `(o.created_at > now() - %s * interval '1 hour' OR ` + InFlightSQL + ` OR o.attention IS NOT NULL)`

// MismatchSQL is the mismatch rule (see Mismatch) as a condition on an operation o joined with
// its task t.
const MismatchSQL = `((t.state IN ('failed','cancelled') OR t.state = 'completed' AND coalesce(t.tool_error, false)) AND o.domain_outcome = 'applied'
	OR t.state = 'completed' AND NOT coalesce(t.tool_error, false) AND o.domain_outcome = 'not_applied')`

// Mismatch is the rule by which a task state and a domain outcome disagree: the server said the
// work failed or was cancelled, or the tool answered with an error, while the system of record
// confirms the effect applied; or the server said it completed without a tool error while the
// system of record confirms it did not apply. A tool error confirmed "not applied" is
// agreement. Open states and outcomes still pending or unknown never disagree. It is
// reconcile.Mismatch, the rule the verifiers open a task_domain_mismatch item by.
func Mismatch(state TaskState, toolError bool, outcome Outcome) bool {
	return reconcile.Mismatch(string(state), toolError, string(outcome))
}

// filterWhere is the WHERE of List and Count for scope and f (without f.After's cursor).
func filterWhere(scope Scope, f Filter) ([]string, []any) {
	var where []string
	var args []any
	arg := binder(&args)
	if !scope.All {
		where = append(where, "o.tenant = ANY("+arg(scope.Tenants)+")")
	}
	if f.Tenant != "" {
		where = append(where, "o.tenant = "+arg(f.Tenant))
	}
	if f.Workflow != "" {
		where = append(where, "o.workflow = "+arg(f.Workflow))
	}
	if f.Route != "" {
		where = append(where, "o.route = "+arg(string(f.Route)))
	}
	if f.TaskState != "" {
		where = append(where, "t.state = "+arg(string(f.TaskState)))
	}
	if f.DomainOutcome != "" {
		where = append(where, "o.domain_outcome = "+arg(string(f.DomainOutcome)))
	}
	if f.Mismatch {
		where = append(where, MismatchSQL)
	}
	if f.Attention {
		where = append(where, NeedsPersonSQL)
	}
	if f.InFlight {
		where = append(where, InFlightSQL)
	}
	if f.NoTask {
		where = append(where, "t.operation_id IS NULL")
	}
	if f.ToolError != nil {
		where = append(where, "coalesce(t.tool_error, false) = "+arg(*f.ToolError))
	}
	if f.Window > 0 {
		where = append(where, fmt.Sprintf(RecentSQL, arg(max(1, int(f.Window/time.Hour)))))
	}
	if q := strings.TrimSpace(f.Search); q != "" {
		p := arg(q)
		like := arg("%" + strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(q) + "%")
		where = append(where, "(o.object_ref ILIKE "+like+" OR o.id::text = lower("+p+") OR t.task_id = "+p+" OR o.idempotency_key = "+p+")")
	}
	return where, args
}

// storedMismatchSQL is MismatchSQL on the columns of overview_ops and overview_totals (the
// partial index overview_ops_mismatch_idx has this predicate, word for word).
const storedMismatchSQL = `((task_state IN ('failed', 'cancelled') OR (task_state = 'completed' AND tool_error)) AND outcome = 'applied' OR (task_state = 'completed' AND NOT tool_error AND outcome = 'not_applied'))`

// storedWhere is filterWhere (without Search) on the columns of overview_ops and
// overview_totals, which name an operation's facts alike, adding its values to args.
func storedWhere(scope Scope, f Filter, args *[]any) []string {
	arg := binder(args)
	var where []string
	if !scope.All {
		where = append(where, "tenant = ANY("+arg(scope.Tenants)+")")
	}
	for _, c := range []struct{ col, v string }{{"tenant", f.Tenant}, {"workflow", f.Workflow}, {"route", string(f.Route)},
		{"task_state", string(f.TaskState)}, {"outcome", string(f.DomainOutcome)}} {
		if c.v != "" {
			where = append(where, c.col+" = "+arg(c.v))
		}
	}
	if f.Mismatch {
		where = append(where, storedMismatchSQL)
	}
	if f.Attention {
		where = append(where, "needs_person")
	}
	if len(where) == 0 {
		where = append(where, "true")
	}
	return where
}

// Count is the real number of operations List would return over all its pages: from the
// counters (overview_totals and the operations still dirty), or for a search from the
// operations the search index finds.
func (s *Store) Count(ctx context.Context, scope Scope, f Filter) (int, error) {
	counted, err := s.overviewCounted(ctx)
	if err != nil {
		return 0, err
	}
	return s.count(ctx, scope, f, counted)
}

// count is Count from the counters (counted) or from the ledger.
func (s *Store) count(ctx context.Context, scope Scope, f Filter, counted bool) (int, error) {
	q, args := countQuery(scope, f, counted)
	var n int
	if err := s.pool.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count operations: %w", err)
	}
	return n, nil
}

// countQuery is the query of count and its arguments.
func countQuery(scope Scope, f Filter, counted bool) (string, []any) {
	if counted && strings.TrimSpace(f.Search) != "" {
		where, args := filterWhere(scope, f)
		where = append(where, "o.id IN ("+searchCandidates(scope, f, &args)+")")
		return `WITH ` + dirtyCTE + ` SELECT count(*) FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id WHERE ` +
			strings.Join(where, " AND "), args
	}
	if counted {
		live, args := filterWhere(scope, f)
		live = append(live, "o.id = ANY ((SELECT ids FROM dirty)::uuid[])")
		stored := strings.Join(storedWhere(scope, f, &args), " AND ")
		return `WITH ` + dirtyCTE + ` SELECT (SELECT coalesce(sum(ops), 0) FROM overview_totals WHERE ` + stored + `)
			+ (SELECT count(*) FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id WHERE ` + strings.Join(live, " AND ") + `)
			- (SELECT count(*) FROM overview_ops WHERE operation_id = ANY ((SELECT ids FROM dirty)::uuid[]) AND ` + stored + `)`, args
	}
	where, args := filterWhere(scope, f)
	q := `SELECT count(*)` + opFrom
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q, args
}

// Question is an open input request with the operation it belongs to: one entry of the inbox.
type Question struct {
	PendingInput
	Operation Operation `json:"operation"`
}

// Questions is a page of the open questions in a scope, the oldest deadline first.
type Questions struct {
	Questions []Question `json:"questions"`
	// Total is the number of open questions in the scope, however many the page shows.
	Total int `json:"total"`
	// MovedOn are questions of the last day left unanswered because the task moved on, expired
	// or became unobservable, newest first.
	MovedOn []Question `json:"moved_on"`
}

// OpenQuestions returns up to limit open questions in scope (deadline soonest first, then the
// oldest), their real total, and the questions of the last day that the task left unanswered.
func (s *Store) OpenQuestions(ctx context.Context, scope Scope, limit int) (Questions, error) {
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	scopeSQL, args := "true", []any{}
	if !scope.All {
		scopeSQL, args = "o.tenant = ANY($1)", []any{scope.Tenants}
	}
	var out Questions
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pending_inputs pi JOIN operations o ON o.id = pi.operation_id
		WHERE pi.state = 'open' AND `+scopeSQL, args...).Scan(&out.Total); err != nil {
		return out, fmt.Errorf("count open questions: %w", err)
	}
	var err error
	out.Questions, err = s.questions(ctx, `pi.state = 'open' AND `+scopeSQL,
		`pi.expires_at ASC NULLS LAST, pi.requested_at, pi.id`, limit, args)
	if err != nil {
		return out, err
	}
	out.MovedOn, err = s.questions(ctx, `pi.state IN ('moved_on', 'expired') AND pi.answered_at IS NULL
		AND pi.requested_at > now() - interval '1 day' AND `+scopeSQL, `pi.requested_at DESC, pi.id DESC`, limit, args)
	return out, err
}

func (s *Store) questions(ctx context.Context, where, order string, limit int, args []any) ([]Question, error) {
	q := `SELECT pi.operation_id, pi.input_key, pi.method, pi.mode, pi.message, pi.fields, pi.redaction_class, pi.state,
		pi.requested_at, pi.expires_at, pi.answered_at, coalesce(pi.answered_by, ''), coalesce(pi.answer_action, ''),
		pi.title, pi.description FROM pending_inputs pi JOIN operations o ON o.id = pi.operation_id WHERE ` + where + ` ORDER BY ` + order + fmt.Sprintf(" LIMIT %d", limit)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("questions: %w", err)
	}
	var ids []string
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Question, error) {
		var qu Question
		var id string
		var fields []byte
		if err := r.Scan(&id, &qu.Key, &qu.Method, &qu.Mode, &qu.Message, &fields, &qu.RedactionClass, &qu.State,
			&qu.RequestedAt, &qu.ExpiresAt, &qu.AnsweredAt, &qu.AnsweredBy, &qu.Action, &qu.Title, &qu.Description); err != nil {
			return qu, err
		}
		ids = append(ids, id)
		qu.Operation.ID = id
		qu.Fields = []Field{}
		return qu, json.Unmarshal(fields, &qu.Fields)
	})
	if err != nil {
		return nil, fmt.Errorf("questions: %w", err)
	}
	if len(out) == 0 {
		return []Question{}, nil
	}
	orows, err := s.pool.Query(ctx, `SELECT `+opColumns+opFrom+` WHERE o.id = ANY($1::text[]::uuid[])`, ids)
	if err != nil {
		return nil, fmt.Errorf("questions' operations: %w", err)
	}
	ops, err := pgx.CollectRows(orows, func(r pgx.CollectableRow) (Operation, error) { return scanOperation(r) })
	if err != nil {
		return nil, fmt.Errorf("questions' operations: %w", err)
	}
	byID := make(map[string]Operation, len(ops))
	for _, op := range ops {
		byID[op.ID] = op
	}
	for i := range out {
		out[i].Operation = byID[out[i].Operation.ID]
	}
	return out, nil
}

// LastLooked is when account last opened the inbox (zero: never).
func (s *Store) LastLooked(ctx context.Context, account int64) (time.Time, error) {
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT seen_at FROM inbox_views WHERE account_id = $1`, account).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("inbox last looked: %w", err)
	}
	return at, nil
}

// Looked records that account opened the inbox at at.
func (s *Store) Looked(ctx context.Context, account int64, at time.Time) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO inbox_views (account_id, seen_at) VALUES ($1, $2)
		ON CONFLICT (account_id) DO UPDATE SET seen_at = greatest(inbox_views.seen_at, excluded.seen_at)`, account, at); err != nil {
		return fmt.Errorf("inbox looked: %w", err)
	}
	return nil
}

// OpenQuestions is Store.OpenQuestions.
func (s *Service) OpenQuestions(ctx context.Context, scope Scope, limit int) (Questions, error) {
	return s.cfg.Store.OpenQuestions(ctx, scope, limit)
}

// LastLooked is Store.LastLooked.
func (s *Service) LastLooked(ctx context.Context, account int64) (time.Time, error) {
	return s.cfg.Store.LastLooked(ctx, account)
}

// Looked is Store.Looked.
func (s *Service) Looked(ctx context.Context, account int64, at time.Time) error {
	return s.cfg.Store.Looked(ctx, account, at)
}
