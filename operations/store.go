package operations

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/safetext"
	"github.com/taskgate/taskgate/reconcile"
)

// Store is the Postgres store of the ledger, tasks, timelines, inputs and envelopes.
type Store struct {
	pool *pgxpool.Pool
	// echoKey is the installation's key of the answer hashes, read once (echo.go).
	echoKey echoKeyCache
	// countedSeen remembers that the console's counters hold the whole ledger (counters.go).
	countedSeen atomic.Bool
	// writes coalesces the start path's single-statement writes of concurrent starts into
	// shared round trips and commits (coalesce.go).
	writes *coalescer
	// reservations coalesces the cap's slot reservations, committed without waiting for a
	// flush (capacity.go).
	reservations *coalescer
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, writes: newCoalescer(pool, DefaultCoalesceMax, DefaultCoalesceLeaders, false),
		reservations: newCoalescer(pool, DefaultCoalesceMax, DefaultCoalesceLeaders, true)}
}

// Pool returns the store's pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// RequestHash is the hash of a start request's body in canonical form (keys sorted).
func RequestHash(r StartRequest) (string, error) {
	var args any = map[string]any{}
	if len(r.Arguments) > 0 && string(r.Arguments) != "null" {
		if err := json.Unmarshal(r.Arguments, &args); err != nil {
			return "", fmt.Errorf("%w: arguments: %v", ErrInvalidRequest, err)
		}
	}
	b, err := json.Marshal(map[string]any{
		"workflow": r.Workflow, "tenant": r.Tenant, "actor": r.Actor, "object_ref": r.ObjectRef,
		"object_version": r.ObjectVersion, "intended_effect": r.IntendedEffect, "arguments": args,
	})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// NewTaskRow is the task row written with a Task-route operation.
type NewTaskRow struct {
	Server, Tool string
	RequestedTTL *time.Duration
}

// Insert is what CreateOperation writes in one transaction.
type Insert struct {
	Request     StartRequest
	Hash        string
	Arguments   json.RawMessage
	Decision    Decision
	PolicySHA   string
	Task        *NewTaskRow
	JobBaseURL  string // job_api route
	Handoff     bool
	RejectReply *StartResponse // stored at once for the reject route
	// Capacity, when set, applies the workflow's concurrency cap of CapacityLimit: it is
	// called with the workflow's non-terminal tasks (see applyCapacity) and returns the insert
	// to write, or an error that writes nothing.
	Capacity      func(inFlight int) (Insert, error)
	CapacityLimit int
	// Sending, on the Task and sync routes, says the call is sent as soon as the row is
	// committed: the row is written with the call marked sending, due within Sending (the
	// create budget or the sync fallback's maximum), so a start costs no commit of its own
	// between the ledger row and the call. Zero: the call is not sent (no connection).
	Sending time.Duration
}

// calling reports whether the insert is a Task or sync start, written by one statement.
func (in Insert) calling() bool {
	return in.JobBaseURL == "" && !in.Handoff && in.RejectReply == nil && (in.Task != nil || in.Decision.Route == RouteSync)
}

// CreateOperation writes the ledger row, the decision, and the route's first row (a creating
// task, a job run, a handoff item) in one transaction. When the key was used before it writes
// nothing and returns the existing operation with existing=true, or ErrKeyReused when the
// request differs.
func (s *Store) CreateOperation(ctx context.Context, in Insert) (op Operation, existing bool, err error) {
	var slot *capacitySlot
	committed := false
	defer func() { slot.settle(ctx, committed && !existing && in.Task != nil) }()
	if in.Capacity != nil {
		full := in
		if in, slot, err = s.applyCapacity(ctx, in); err != nil {
			// At the cap: a repeat of a start that got in is answered as the repeat it is.
			if prev, perr, ok := s.repeated(ctx, full, err); ok {
				return prev, true, perr
			}
			return Operation{}, false, err
		}
	}
	if in.calling() {
		op, existing, err = s.insertCalling(ctx, in, slot)
		committed = err == nil
		return op, existing, err
	}
	newID, err := newOperationID()
	if err != nil {
		return Operation{}, false, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r := in.Request
		var id string
		err := tx.QueryRow(ctx, `
			INSERT INTO operations (id, tenant, workflow, idempotency_key, request_sha256, actor, object_ref,
				object_version, intended_effect, arguments, route, reason_code, reason, declare_extension, policy_sha256,
				domain_outcome, route_context)
			VALUES ($16,$1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,
				CASE WHEN $10 = 'reject' THEN 'not_run' ELSE 'pending' END, $15)
			ON CONFLICT (tenant, workflow, idempotency_key) DO NOTHING
			RETURNING id`,
			r.Tenant, r.Workflow, r.IdempotencyKey, in.Hash, r.Actor, r.ObjectRef, r.ObjectVersion,
			r.IntendedEffect, in.Arguments, in.Decision.Route, in.Decision.ReasonCode, in.Decision.Reason,
			in.Decision.DeclareExtension, in.PolicySHA, nullJSON(in.Decision.Context), newID).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			existing = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("insert operation: %w", err)
		}
		switch {
		case in.Task != nil:
			var ttl *int64
			if in.Task.RequestedTTL != nil {
				v := in.Task.RequestedTTL.Milliseconds()
				ttl = &v
			}
			// One statement: the task, its first timeline entry and, under a cap, the
			// reservation turned into the task (no task when the reservation was reclaimed).
			tag, err := tx.Exec(ctx, `WITH s AS (DELETE FROM capacity_slots WHERE id = $5 RETURNING id),
					t AS (INSERT INTO tasks (operation_id, server, tool, state, requested_ttl_ms)
						SELECT $1, $2, $3, 'creating', $4 WHERE $5::bigint IS NULL OR EXISTS (SELECT 1 FROM s) RETURNING operation_id)
				INSERT INTO task_timeline (operation_id, source, state, message) SELECT operation_id, 'create', 'creating', 'task creation sent' FROM t`,
				id, in.Task.Server, in.Task.Tool, ttl, slot.slotID())
			if err != nil {
				return fmt.Errorf("insert task: %w", err)
			}
			if tag.RowsAffected() != 1 {
				return errSlotReclaimed
			}
		case in.JobBaseURL != "":
			if _, err := tx.Exec(ctx, `WITH c AS (INSERT INTO operation_calls (operation_id) VALUES ($1))
				INSERT INTO job_runs (operation_id, base_url) VALUES ($1,$2)`, id, in.JobBaseURL); err != nil {
				return fmt.Errorf("insert job run: %w", err)
			}
		case in.Handoff:
			if _, err := tx.Exec(ctx, `INSERT INTO handoff_items (operation_id) VALUES ($1)`, id); err != nil {
				return fmt.Errorf("insert handoff: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE operations SET attention = $2, attention_reason = 'handoff' WHERE id = $1`, id, AttentionHandoff); err != nil {
				return err
			}
			if _, err := reconcile.OpenTx(ctx, tx, id, reconcile.ReasonHumanHandoff, "the workflow hands this operation to a person"); err != nil {
				return err
			}
		}
		if in.RejectReply != nil {
			in.RejectReply.OperationID = id
			in.RejectReply.Links = linksFor(id, RouteReject)
			if err := setResponse(ctx, tx, id, 409, *in.RejectReply); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Operation{}, false, err
	}
	committed = true
	r := in.Request
	op, err = s.byKey(ctx, r.Tenant, r.Workflow, r.IdempotencyKey)
	if err != nil {
		return Operation{}, false, err
	}
	if existing && op.requestHash != in.Hash {
		return op, true, fmt.Errorf("key %q of workflow %s was used for operation %s with a different request: %w",
			r.IdempotencyKey, r.Workflow, op.ID, ErrKeyReused)
	}
	return op, existing, nil
}

// repeated returns, when the capacity check refused a start (err is a *CapacityError), the
// operation that used its key before (ok), with ErrKeyReused when the request differs.
func (s *Store) repeated(ctx context.Context, in Insert, err error) (Operation, error, bool) {
	var ce *CapacityError
	if !errors.As(err, &ce) {
		return Operation{}, nil, false
	}
	r := in.Request
	prev, lerr := s.byKey(ctx, r.Tenant, r.Workflow, r.IdempotencyKey)
	if lerr != nil {
		return Operation{}, nil, false
	}
	if prev.requestHash != in.Hash {
		return prev, fmt.Errorf("key %q of workflow %s was used for operation %s with a different request: %w",
			r.IdempotencyKey, r.Workflow, prev.ID, ErrKeyReused), true
	}
	return prev, nil, true
}

// insertCalling writes a Task or sync start in one statement, so one round trip and one commit:
// the ledger row with its call (operation_calls) marked sending (Insert.Sending), the creating
// task with its
// first timeline entry, and under a cap the reservation turned into the task. The slot's row is
// locked first, so a recount that reclaims it either waits for this commit and finds it taken, or
// took it before and this start writes nothing (errSlotReclaimed). A key used before writes
// nothing and returns the existing operation.
func (s *Store) insertCalling(ctx context.Context, in Insert, slot *capacitySlot) (Operation, bool, error) {
	r := in.Request
	var server, tool, state, message *string
	var ttl *int64
	if t := in.Task; t != nil {
		server, tool = &t.Server, &t.Tool
		if t.RequestedTTL != nil {
			v := t.RequestedTTL.Milliseconds()
			ttl = &v
		}
		st, msg := string(StateCreating), "task creation sent"
		state, message = &st, &msg
	} else if in.Sending > 0 {
		st, msg := "calling", "synchronous call sent"
		state, message = &st, &msg
	}
	var sending *int64
	if in.Sending > 0 {
		v := in.Sending.Milliseconds()
		sending = &v
	}
	op := Operation{Tenant: r.Tenant, Workflow: r.Workflow, IdempotencyKey: r.IdempotencyKey, requestHash: in.Hash, Actor: r.Actor,
		ObjectRef: r.ObjectRef, ObjectVersion: r.ObjectVersion, IntendedEffect: r.IntendedEffect, arguments: in.Arguments,
		Route: in.Decision.Route, ReasonCode: in.Decision.ReasonCode, Reason: in.Decision.Reason, DomainOutcome: OutcomePending,
		RouteContext: in.Decision.Context}
	newID, err := newOperationID()
	if err != nil {
		return Operation{}, false, err
	}
	err = s.writes.row(ctx, func(row pgx.Row) error { return row.Scan(&op.ID, &op.CreatedAt, &op.UpdatedAt) },
		`WITH l AS (SELECT id FROM capacity_slots WHERE id = $16 FOR UPDATE),
		o AS (INSERT INTO operations (id, tenant, workflow, idempotency_key, request_sha256, actor, object_ref,
				object_version, intended_effect, arguments, route, reason_code, reason, declare_extension, policy_sha256,
				domain_outcome, route_context)
			SELECT $23,$1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14, 'pending', $15
			WHERE $16::bigint IS NULL OR EXISTS (SELECT 1 FROM l)
			ON CONFLICT (tenant, workflow, idempotency_key) DO NOTHING
			RETURNING id, created_at, updated_at),
		c AS (INSERT INTO operation_calls (operation_id, sent_at, due_at)
			SELECT id, CASE WHEN $17::bigint IS NOT NULL THEN now() END, now() + $17::bigint * interval '1 millisecond' FROM o),
		t AS (INSERT INTO tasks (operation_id, server, tool, state, requested_ttl_ms)
			SELECT id, $18, $19, 'creating', $20 FROM o WHERE $18::text IS NOT NULL RETURNING operation_id),
		s AS (DELETE FROM capacity_slots WHERE id IN (SELECT id FROM l) AND EXISTS (SELECT 1 FROM t)),
		tl AS (INSERT INTO task_timeline (operation_id, source, state, message) SELECT id, 'create', $21, $22 FROM o WHERE $21::text IS NOT NULL)
		SELECT id, created_at, updated_at FROM o`,
		r.Tenant, r.Workflow, r.IdempotencyKey, in.Hash, r.Actor, r.ObjectRef, r.ObjectVersion,
		r.IntendedEffect, in.Arguments, in.Decision.Route, in.Decision.ReasonCode, in.Decision.Reason,
		in.Decision.DeclareExtension, in.PolicySHA, nullJSON(in.Decision.Context), slot.slotID(), sending,
		server, tool, ttl, state, message, newID)
	if errors.Is(err, pgx.ErrNoRows) {
		existing, err := s.byKey(ctx, r.Tenant, r.Workflow, r.IdempotencyKey)
		if errors.Is(err, ErrNotFound) && slot != nil {
			return Operation{}, false, errSlotReclaimed
		}
		if err != nil {
			return Operation{}, false, err
		}
		if existing.requestHash != in.Hash {
			return existing, true, fmt.Errorf("key %q of workflow %s was used for operation %s with a different request: %w",
				r.IdempotencyKey, r.Workflow, existing.ID, ErrKeyReused)
		}
		return existing, true, nil
	}
	if err != nil {
		return Operation{}, false, fmt.Errorf("insert operation: %w", err)
	}
	if t := in.Task; t != nil {
		op.Task = &Task{Server: t.Server, Tool: t.Tool, State: StateCreating, RequestedTTL: t.RequestedTTL}
	}
	return op, false, nil
}

// newOperationID returns a new operation id: a version 7 UUID, whose first 48 bits are the
// time in milliseconds. Every table keyed by operation (operations, tasks, the timeline, the
// calls) then takes new rows at the right edge of its index instead of on a random page: at a
// million operations a start with random (version 4) ids wrote 2.2 full-page images to the
// write-ahead log and cost PostgreSQL 38 % more CPU than on an empty ledger. The next 12 bits
// are the time within the millisecond, the last 62 random (crypto/rand), so ids stay
// unguessable; the time they show is the operation's creation, which the console shows anyway.
func newOperationID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new operation id: %w", err)
	}
	return id.String(), nil
}

func setResponse(ctx context.Context, q querier, id string, status int, body StartResponse) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, `UPDATE operations SET response_status = $2, response_body = $3 WHERE id = $1 AND response_status IS NULL`, id, status, b)
	if err != nil {
		return fmt.Errorf("store response of %s: %w", id, err)
	}
	return nil
}

// SetResponse stores the first answer given for an operation; later calls change nothing.
func (s *Store) SetResponse(ctx context.Context, id string, status int, body StartResponse) error {
	return setResponse(ctx, s.pool, id, status, body)
}

// FirstResponse stores body as the operation's first answer unless one was stored already, and
// returns the first answer: one statement when it is this one.
func (s *Store) FirstResponse(ctx context.Context, id string, status int, body StartResponse) (int, StartResponse, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, body, err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE operations SET response_status = $2, response_body = $3 WHERE id = $1 AND response_status IS NULL`, id, status, b)
	if err != nil {
		return 0, body, fmt.Errorf("store response of %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		var out StartResponse
		if err := json.Unmarshal(b, &out); err != nil {
			return 0, body, fmt.Errorf("decode response of %s: %w", id, err)
		}
		return status, out, nil
	}
	st, out, ok, err := s.Response(ctx, id)
	if err == nil && !ok {
		err = fmt.Errorf("response of %s: %w", id, ErrNotFound)
	}
	return st, out, err
}

// Response returns the stored first answer, ok=false when none was stored yet.
func (s *Store) Response(ctx context.Context, id string) (status int, body StartResponse, ok bool, err error) {
	var st *int
	var raw []byte
	if err := s.pool.QueryRow(ctx, `SELECT response_status, response_body FROM operations WHERE id = $1`, id).Scan(&st, &raw); err != nil {
		return 0, body, false, notFound(id, err)
	}
	if st == nil {
		return 0, body, false, nil
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		return 0, body, false, fmt.Errorf("decode stored response of %s: %w", id, err)
	}
	return *st, body, true, nil
}

// execer runs a statement without rows: a pool, a transaction or the start path's coalescer.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

type querier interface {
	execer
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func notFound(id string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("operation %s: %w", id, ErrNotFound)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "22P02" { // invalid uuid text
		return fmt.Errorf("operation %s: %w", id, ErrNotFound)
	}
	return fmt.Errorf("operation %s: %w", id, err)
}

const opColumns = `o.id, o.tenant, o.workflow, o.idempotency_key, o.request_sha256, o.actor, o.object_ref,
	o.object_version, o.intended_effect, o.arguments, o.route, o.reason_code, o.reason, o.domain_outcome,
	coalesce(o.attention, ''), coalesce(o.attention_reason, ''), o.route_context, o.created_at, o.updated_at,
	t.operation_id IS NOT NULL, coalesce(t.server, ''), coalesce(t.tool, ''), coalesce(t.era, ''), coalesce(t.task_id, ''),
	coalesce(t.state, ''), coalesce(t.status_message, ''), coalesce(t.tool_error, false), t.server_created_at, t.server_updated_at,
	t.requested_ttl_ms, t.ttl_ms, t.poll_interval_ms, t.deadline, ` + NextPollSQL + `, coalesce(t.polls, 0), coalesce(t.failure_kind, ''),
	coalesce(t.result_state, ''), t.cancel_requested_at, coalesce(t.cancel_requested_by, ''), t.cancel_acknowledged_at, t.terminal_at,
	coalesce(t.session_id, ''), t.capabilities, coalesce(t.server_name, ''), coalesce(t.server_version, ''),
	j.operation_id IS NOT NULL, coalesce(j.job_id, ''), coalesce(j.status, ''), coalesce(j.receipt_id, ''), coalesce(j.error, ''),
	coalesce(j.polls, 0), coalesce(j.base_url, ''), coalesce(o.failure_reason, ''), coalesce(o.failure_reason_by, ''), ` + NeedsPersonSQL

const opFrom = ` FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id LEFT JOIN job_runs j ON j.operation_id = o.id`

func scanOperation(row pgx.Row) (Operation, error) {
	var o Operation
	var t Task
	var j JobRun
	var hasTask, hasJob bool
	var reqTTL, ttl, poll *int64
	if err := row.Scan(&o.ID, &o.Tenant, &o.Workflow, &o.IdempotencyKey, &o.requestHash, &o.Actor, &o.ObjectRef,
		&o.ObjectVersion, &o.IntendedEffect, &o.arguments, &o.Route, &o.ReasonCode, &o.Reason, &o.DomainOutcome,
		&o.Attention, &o.AttentionReason, &o.RouteContext, &o.CreatedAt, &o.UpdatedAt,
		&hasTask, &t.Server, &t.Tool, &t.Era, &t.TaskID, &t.State, &t.StatusMessage, &t.ToolError, &t.ServerCreatedAt, &t.ServerUpdatedAt,
		&reqTTL, &ttl, &poll, &t.Deadline, &t.NextPollAt, &t.Polls, &t.FailureKind,
		&t.ResultState, &t.CancelRequested, &t.CancelBy, &t.CancelAcked, &t.TerminalAt,
		&t.sessionID, &t.capabilities, &t.serverName, &t.serverVersion,
		&hasJob, &j.JobID, &j.Status, &j.ReceiptID, &j.Error, &j.Polls, &j.baseURL, &o.FailureReason, &o.FailureReasonBy, &o.NeedsPerson); err != nil {
		return o, err
	}
	dur := func(p *int64) *time.Duration {
		if p == nil {
			return nil
		}
		d := time.Duration(*p) * time.Millisecond
		return &d
	}
	t.RequestedTTL, t.TTL = dur(reqTTL), dur(ttl)
	if poll != nil {
		t.PollInterval = time.Duration(*poll) * time.Millisecond
	}
	if hasTask {
		o.Task = &t
	}
	if hasJob {
		o.Job = &j
	}
	return o, nil
}

func (s *Store) byKey(ctx context.Context, tenant, workflow, key string) (Operation, error) {
	op, err := scanOperation(s.pool.QueryRow(ctx, `SELECT `+opColumns+opFrom+
		` WHERE o.tenant = $1 AND o.workflow = $2 AND o.idempotency_key = $3`, tenant, workflow, key))
	if err != nil {
		return op, notFound(key, err)
	}
	return op, nil
}

// Get returns one operation with its task and job.
func (s *Store) Get(ctx context.Context, id string) (Operation, error) {
	op, err := scanOperation(s.pool.QueryRow(ctx, `SELECT `+opColumns+opFrom+` WHERE o.id = $1`, id))
	if err != nil {
		return op, notFound(id, err)
	}
	return op, nil
}

// ByTask returns the operation of a server's task id.
func (s *Store) ByTask(ctx context.Context, server, taskID string) (Operation, error) {
	op, err := scanOperation(s.pool.QueryRow(ctx, `SELECT `+opColumns+opFrom+` WHERE t.server = $1 AND t.task_id = $2`, server, taskID))
	if err != nil {
		return op, notFound(server+"/"+taskID, err)
	}
	return op, nil
}

// Detail returns an operation with its timeline, violations, inputs, envelope and
// reconciliation item.
func (s *Store) Detail(ctx context.Context, id string) (Detail, error) {
	op, err := s.Get(ctx, id)
	if err != nil {
		return Detail{}, err
	}
	d := Detail{Operation: op, Timeline: []TimelineEntry{}, Violations: []Violation{}, Inputs: []PendingInput{}, Mismatched: op.Mismatch()}
	rows, err := s.pool.Query(ctx, `SELECT at, source, coalesce(actor, ''), state, message FROM task_timeline WHERE operation_id = $1 ORDER BY id`, id)
	if err != nil {
		return d, fmt.Errorf("timeline of %s: %w", id, err)
	}
	d.Timeline, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TimelineEntry, error) {
		var e TimelineEntry
		return e, r.Scan(&e.At, &e.Source, &e.Actor, &e.State, &e.Message)
	})
	if err != nil {
		return d, fmt.Errorf("timeline of %s: %w", id, err)
	}
	rows, err = s.pool.Query(ctx, `SELECT task_id, from_state, to_state, source, observed_at, kind, detail FROM transition_violations WHERE operation_id = $1 ORDER BY id`, id)
	if err != nil {
		return d, fmt.Errorf("violations of %s: %w", id, err)
	}
	d.Violations, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Violation, error) {
		var v Violation
		return v, r.Scan(&v.TaskID, &v.From, &v.To, &v.Source, &v.ObservedAt, &v.Kind, &v.Detail)
	})
	if err != nil {
		return d, fmt.Errorf("violations of %s: %w", id, err)
	}
	if d.Inputs, err = s.Inputs(ctx, id); err != nil {
		return d, err
	}
	var e Envelope
	err = s.pool.QueryRow(ctx, `SELECT status, era, tool_error, error_code, started_at, finished_at, status_message,
		result_size, result_sha256, preview, evidence_handle, result, text_replaced, fetched_at FROM task_envelopes WHERE operation_id = $1`, id).
		Scan(&e.Status, &e.Era, &e.ToolError, &e.ErrorCode, &e.StartedAt, &e.FinishedAt, &e.StatusMessage,
			&e.ResultSize, &e.ResultSHA256, &e.Preview, &e.EvidenceHandle, &e.Result, &e.TextReplaced, &e.FetchedAt)
	switch {
	case err == nil:
		d.Envelope = &e
	case !errors.Is(err, pgx.ErrNoRows):
		return d, fmt.Errorf("envelope of %s: %w", id, err)
	}
	var ri ReconciliationItem
	err = s.pool.QueryRow(ctx, `SELECT public_id::text, reason, opened_at, closed_at FROM reconciliation_items WHERE operation_id = $1 ORDER BY id DESC LIMIT 1`, id).
		Scan(&ri.ID, &ri.Reason, &ri.OpenedAt, &ri.ClosedAt)
	switch {
	case err == nil:
		d.Reconciliation = &ri
	case !errors.Is(err, pgx.ErrNoRows):
		return d, fmt.Errorf("reconciliation item of %s: %w", id, err)
	}
	return d, nil
}

// Inputs returns the input requests of an operation, oldest first.
func (s *Store) Inputs(ctx context.Context, id string) ([]PendingInput, error) {
	rows, err := s.pool.Query(ctx, `SELECT input_key, method, mode, message, fields, redaction_class, state, requested_at,
		expires_at, answered_at, coalesce(answered_by, ''), coalesce(answer_action, ''), title, description, requested_schema
		FROM pending_inputs WHERE operation_id = $1 ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("inputs of %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingInput, error) {
		var p PendingInput
		var fields []byte
		var schema []byte
		if err := r.Scan(&p.Key, &p.Method, &p.Mode, &p.Message, &fields, &p.RedactionClass, &p.State, &p.RequestedAt,
			&p.ExpiresAt, &p.AnsweredAt, &p.AnsweredBy, &p.Action, &p.Title, &p.Description, &schema); err != nil {
			return p, err
		}
		if len(schema) > 0 {
			p.RequestedSchema = schema
		}
		p.Fields = []Field{}
		return p, json.Unmarshal(fields, &p.Fields)
	})
	if err != nil {
		return nil, fmt.Errorf("inputs of %s: %w", id, err)
	}
	if out == nil {
		out = []PendingInput{}
	}
	return out, nil
}

// List returns a page of operations, newest first, with keyset pagination on (created_at, id),
// and the filter's real total. A filter on what the ledger spreads over several tables or on a
// column whose values may be rare (task state, needs a person, mismatch, workflow, route,
// outcome) takes its page from overview_ops' indexes for the operations not dirty and from the
// ledger for the dirty ones; the others walk the ledger's list indexes.
func (s *Store) List(ctx context.Context, scope Scope, f Filter) (Page, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	if f.Limit > 500 {
		f.Limit = 500
	}
	counted, err := s.overviewCounted(ctx)
	if err != nil {
		return Page{}, err
	}
	return s.list(ctx, scope, f, counted)
}

// list is List with the counters' indexes and totals (counted) or without.
func (s *Store) list(ctx context.Context, scope Scope, f Filter, counted bool) (Page, error) {
	var q string
	var args []any
	var err error
	p := Page{Operations: []Operation{}}
	if counted && strings.TrimSpace(f.Search) != "" {
		// A search's total and page come from one read of the search index.
		sq, sargs, err := searchQuery(scope, f)
		if err != nil {
			return Page{}, err
		}
		var ids []string
		if err := s.pool.QueryRow(ctx, sq, sargs...).Scan(&p.Total, &ids); err != nil {
			return Page{}, fmt.Errorf("search operations: %w", err)
		}
		if len(ids) == 0 {
			return p, nil
		}
		q, args = `SELECT `+opColumns+opFrom+` WHERE o.id = ANY($1::text[]::uuid[]) ORDER BY o.created_at DESC, o.id DESC`, []any{ids}
	} else {
		if q, args, err = listQuery(scope, f, counted); err != nil {
			return Page{}, err
		}
		if p.Total, err = s.count(ctx, scope, f, counted); err != nil {
			return Page{}, err
		}
		if p.Total == 0 {
			return p, nil
		}
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list operations: %w", err)
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Operation, error) { return scanOperation(r) })
	if err != nil {
		return Page{}, fmt.Errorf("list operations: %w", err)
	}
	p.Operations = ops
	if p.Operations == nil {
		p.Operations = []Operation{}
	}
	if len(ops) > f.Limit {
		p.Operations = ops[:f.Limit]
		last := p.Operations[f.Limit-1]
		p.Next = encodeCursor(last.CreatedAt, last.ID)
	}
	return p, nil
}

// binder returns arg, which appends v to *args and names it as the query's parameter ($n).
func binder(args *[]any) func(v any) string {
	return func(v any) string {
		*args = append(*args, v)
		return fmt.Sprintf("$%d", len(*args))
	}
}

// searchQuery is the query of a search's total and the ids of its page (f.Limit and one more,
// in list order), from the candidates the search index finds.
func searchQuery(scope Scope, f Filter) (string, []any, error) {
	var after time.Time
	var afterID string
	if f.After != "" {
		var err error
		if after, afterID, err = decodeCursor(f.After); err != nil {
			return "", nil, err
		}
	}
	where, args := filterWhere(scope, f)
	arg := binder(&args)
	where = append(where, "o.id IN ("+searchCandidates(scope, f, &args)+")")
	page := "true"
	if f.After != "" {
		page = "(created_at, id) < (" + arg(after) + ", " + arg(afterID) + "::uuid)"
	}
	return `WITH ` + dirtyCTE + `, c AS MATERIALIZED (SELECT o.id, o.created_at FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id
		WHERE ` + strings.Join(where, " AND ") + `)
		SELECT (SELECT count(*) FROM c), coalesce((SELECT array_agg(id::text ORDER BY created_at DESC, id DESC) FROM
			(SELECT id, created_at FROM c WHERE ` + page + ` ORDER BY created_at DESC, id DESC LIMIT ` + arg(f.Limit+1) + `) p), '{}')`, args, nil
}

// listQuery is the query of a page of List (f.Limit rows and one more) and its arguments; a
// search with the counters goes through searchQuery instead.
func listQuery(scope Scope, f Filter, counted bool) (string, []any, error) {
	var after time.Time
	var afterID string
	if f.After != "" {
		var err error
		if after, afterID, err = decodeCursor(f.After); err != nil {
			return "", nil, err
		}
	}
	where, args := filterWhere(scope, f)
	arg := binder(&args)
	// The page's ids first, then their rows: the columns' subqueries (NeedsPersonSQL) are
	// planned for the page's rows, not for every row the filter could select.
	var with, ids string
	if counted && usesOverviewIndexes(f) {
		with = `WITH ` + dirtyCTE + ` `
		stored := storedWhere(scope, f, &args)
		if f.After != "" {
			at, id := arg(after), arg(afterID)
			where = append(where, "(o.created_at, o.id) < ("+at+", "+id+"::uuid)")
			stored = append(stored, "(created_at, operation_id) < ("+at+", "+id+"::uuid)")
		}
		n := arg(f.Limit + 1)
		ids = `SELECT c.id FROM (
			(SELECT operation_id AS id, created_at FROM overview_ops WHERE ` + strings.Join(stored, " AND ") + `
				AND NOT (operation_id = ANY ((SELECT ids FROM dirty)::uuid[]))
				ORDER BY created_at DESC, operation_id DESC LIMIT ` + n + `)
			UNION ALL
			(SELECT o.id, o.created_at FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id
				WHERE o.id = ANY ((SELECT ids FROM dirty)::uuid[]) AND ` + strings.Join(where, " AND ") + `)
			) c ORDER BY c.created_at DESC, c.id DESC LIMIT ` + n
	} else {
		if f.After != "" {
			where = append(where, "(o.created_at, o.id) < ("+arg(after)+", "+arg(afterID)+"::uuid)")
		}
		ids = `SELECT o.id FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id`
		if len(where) > 0 {
			ids += " WHERE " + strings.Join(where, " AND ")
		}
		ids += " ORDER BY o.created_at DESC, o.id DESC LIMIT " + arg(f.Limit+1)
	}
	return with + `SELECT ` + opColumns + opFrom + ` WHERE o.id IN (` + ids + `) ORDER BY o.created_at DESC, o.id DESC`, args, nil
}

// searchCandidates selects the ids a search can match (with dirtyCTE): those overview_search
// finds by its indexes among the operations not dirty, and the dirty ones; the list's own
// conditions then decide on the ledger's rows.
func searchCandidates(scope Scope, f Filter, args *[]any) string {
	arg := binder(args)
	q := strings.TrimSpace(f.Search)
	match := []string{"object_ref ILIKE " + arg("%"+strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(q)+"%"),
		"idempotency_key = " + arg(q), "task_id = " + arg(q)}
	if validUUID(q) {
		match = append(match, "operation_id = "+arg(strings.ToLower(q))+"::uuid")
	}
	where := []string{"(" + strings.Join(match, " OR ") + ")", "NOT (operation_id = ANY ((SELECT ids FROM dirty)::uuid[]))"}
	if !scope.All {
		where = append(where, "tenant = ANY("+arg(scope.Tenants)+")")
	}
	if f.Tenant != "" {
		where = append(where, "tenant = "+arg(f.Tenant))
	}
	return `SELECT operation_id FROM overview_search WHERE ` + strings.Join(where, " AND ") +
		` UNION ALL SELECT unnest((SELECT ids FROM dirty)::uuid[])`
}

// usesOverviewIndexes reports whether List pages f through overview_ops: a filter on what the
// ledger spreads over several tables, or on a column whose values may be rare, and no search.
// Without one (all, a tenant) the ledger's own list indexes serve.
func usesOverviewIndexes(f Filter) bool {
	return strings.TrimSpace(f.Search) == "" &&
		(f.Workflow != "" || f.Route != "" || f.TaskState != "" || f.DomainOutcome != "" || f.Mismatch || f.Attention)
}

func encodeCursor(at time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(at.UTC().Format(time.RFC3339Nano) + "|" + id))
}

// validUUID reports whether s is a UUID in its canonical 36-character text form.
func validUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		at, id, ok := strings.Cut(string(b), "|")
		if ok {
			t, err := time.Parse(time.RFC3339Nano, at)
			if err == nil && validUUID(id) {
				return t, id, nil
			}
		}
	}
	return time.Time{}, "", fmt.Errorf("%w: bad cursor", ErrInvalidRequest)
}

// CreatedTask is what a task creation returned.
type CreatedTask struct {
	TaskID        string
	Era           string
	State         TaskState
	StatusMessage string
	SessionID     string
	Capabilities  json.RawMessage
	ServerName    string
	ServerVersion string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	TTL           *time.Duration
	PollInterval  time.Duration
	// Deadline is creation + min(granted TTL, policy max TTL).
	Deadline   time.Time
	NextPollAt time.Time
}

// RecordCreated stores the created task (state from CreateTaskResult) and its timeline entry,
// and notes the call recorded, in one statement (one commit). clean is false when the server's
// text had to be replaced to be stored: the outcome then went to reconciliation with an item.
func (s *Store) RecordCreated(ctx context.Context, opID string, c CreatedTask) (clean bool, err error) {
	var replaced [5]bool
	c.TaskID, replaced[0] = safetext.Clean(c.TaskID)
	c.StatusMessage, replaced[1] = safetext.Clean(c.StatusMessage)
	c.ServerName, replaced[2] = safetext.Clean(c.ServerName)
	c.ServerVersion, replaced[3] = safetext.Clean(c.ServerVersion)
	c.Capabilities, replaced[4] = safetext.CleanJSON(c.Capabilities)
	var ttl *int64
	if c.TTL != nil {
		v := c.TTL.Milliseconds()
		ttl = &v
	}
	resultState := "none"
	var terminal *time.Time
	if TaskState(c.State).Final() {
		resultState = "pending"
		now := time.Now()
		terminal = &now
	}
	// One statement: the task, the call recorded and the timeline entry.
	record := func(q execer) error {
		tag, err := q.Exec(ctx, `WITH t AS (UPDATE tasks SET task_id = $2, era = $3, state = $4, status_message = $5, session_id = $6,
				capabilities = $7, server_name = $8, server_version = $9, server_created_at = $10, server_updated_at = $11,
				ttl_ms = $12, poll_interval_ms = $13, deadline = $14, next_poll_at = $15, result_state = $16, terminal_at = $17, updated_at = now()
				WHERE operation_id = $1 AND state = 'creating' RETURNING operation_id),
			c AS (DELETE FROM operation_calls WHERE operation_id IN (SELECT operation_id FROM t))
			INSERT INTO task_timeline (operation_id, source, state, message) SELECT operation_id, $18, $19, $5 FROM t`,
			opID, c.TaskID, c.Era, c.State, c.StatusMessage, c.SessionID, nullJSON(c.Capabilities), c.ServerName, c.ServerVersion,
			nullTime(c.CreatedAt), nullTime(c.UpdatedAt), ttl, nullMillis(c.PollInterval), c.Deadline, c.NextPollAt, resultState, terminal,
			SourceCreate, string(c.State))
		if err != nil {
			return fmt.Errorf("record created task of %s: %w", opID, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("record created task of %s: task is not creating: %w", opID, ErrNotFound)
		}
		return nil
	}
	if replaced == [5]bool{} {
		return true, record(s.writes)
	}
	return false, pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := record(tx); err != nil {
			return err
		}
		for i, what := range []string{"task id", "status message", "server name", "server version", "capabilities"} {
			if replaced[i] {
				return textReplaced(ctx, tx, opID, "the server's "+what+" at task creation")
			}
		}
		return nil
	})
}

// FirstAnswer is the first answer to a start (its HTTP status and body).
type FirstAnswer struct {
	Status int
	Body   StartResponse
}

func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullMillis(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	v := d.Milliseconds()
	return &v
}

// callRecorded notes that the answer of an operation's call was recorded (the recovery sweep
// looks for calls sent and never recorded).
func callRecorded(ctx context.Context, q querier, opID string) error {
	if _, err := q.Exec(ctx, `DELETE FROM operation_calls WHERE operation_id = $1`, opID); err != nil {
		return fmt.Errorf("note the call of %s recorded: %w", opID, err)
	}
	return nil
}

// textReplaced records that what the server sent for an operation held text PostgreSQL cannot
// store: the timeline says which text, and the outcome goes to reconciliation because the kept
// record is not verbatim.
func textReplaced(ctx context.Context, tx pgx.Tx, opID, what string) error {
	msg := what + " held NUL or invalid UTF-8, replaced by U+FFFD to be stored"
	if err := addTimeline(ctx, tx, opID, SourceWatcher, "text_replaced", msg); err != nil {
		return err
	}
	return markUnknown(ctx, tx, opID, "", ReasonServerTextReplaced, msg)
}

// addTimeline appends a line written by source, which is never a person (see addPersonTimeline).
func addTimeline(ctx context.Context, q querier, opID, source, state, message string) error {
	if source == SourceOperator {
		return fmt.Errorf("timeline of %s: a person's line names the person (addPersonTimeline)", opID)
	}
	return insertTimeline(ctx, q, opID, source, nil, state, message)
}

// addPersonTimeline appends a line for an action of the person actor.
func addPersonTimeline(ctx context.Context, q querier, opID, actor, state, message string) error {
	return insertTimeline(ctx, q, opID, SourceOperator, &actor, state, message)
}

func insertTimeline(ctx context.Context, q querier, opID, source string, actor *string, state, message string) error {
	message, _ = safetext.Clean(message)
	if actor != nil {
		a := safetext.CutPlain(*actor, 200)
		actor = &a
	}
	if _, err := q.Exec(ctx, `INSERT INTO task_timeline (operation_id, source, actor, state, message) VALUES ($1,$2,$3,$4,$5)`,
		opID, source, actor, state, message); err != nil {
		return fmt.Errorf("timeline of %s: %w", opID, err)
	}
	return nil
}

// AddTimeline appends a timeline entry written by source, which may not be SourceOperator: a
// person's actions are recorded by the methods that carry them out, with the person's name.
func (s *Store) AddTimeline(ctx context.Context, opID, source, state, message string) error {
	return addTimeline(ctx, s.pool, opID, source, state, message)
}

// MarkUnknown puts an operation in a dead-end task state (create_unacknowledged, unobservable,
// expired; "" leaves the task state) with the domain outcome unknown, and opens a
// reconciliation item with reason. It never sets a protocol failure.
func (s *Store) MarkUnknown(ctx context.Context, opID string, state TaskState, reason, message string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return markUnknown(ctx, tx, opID, state, reason, message) })
}

func markUnknown(ctx context.Context, tx pgx.Tx, opID string, state TaskState, reason, message string) error {
	_, err := markUnknownOpened(ctx, tx, opID, state, reason, message)
	return err
}

// markUnknownOpened is markUnknown reporting whether it opened a reconciliation item.
func markUnknownOpened(ctx context.Context, tx pgx.Tx, opID string, state TaskState, reason, message string) (bool, error) {
	if err := callRecorded(ctx, tx, opID); err != nil {
		return false, err
	}
	if state != "" {
		if _, err := tx.Exec(ctx, `UPDATE tasks SET state = $2, failure_kind = coalesce(failure_kind, $3), next_poll_at = NULL,
			lease_owner = NULL, lease_expires_at = NULL, terminal_at = coalesce(terminal_at, now()), updated_at = now()
			WHERE operation_id = $1 AND state NOT IN ('completed','failed','cancelled')`, opID, state, reason); err != nil {
			return false, fmt.Errorf("mark task of %s %s: %w", opID, state, err)
		}
		if err := addTimeline(ctx, tx, opID, SourceWatcher, string(state), message); err != nil {
			return false, err
		}
		if err := closeOpenInputs(ctx, tx, opID, state, message); err != nil {
			return false, err
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE operations SET domain_outcome = 'unknown', attention = $2, attention_reason = $3, updated_at = now()
		WHERE id = $1 AND domain_outcome = 'pending'`, opID, AttentionReconcile, reason); err != nil {
		return false, fmt.Errorf("mark %s unknown: %w", opID, err)
	}
	return reconcile.OpenTx(ctx, tx, opID, reason, message)
}

// Observation is one observed task status.
type Observation struct {
	State         TaskState
	StatusMessage string
	UpdatedAt     time.Time
	TTL           *time.Duration
	PollInterval  time.Duration
	// Basis is the state the observer knew when it made its reading: for a status read, the
	// stored state its request was sent on; for a notification, the state its connection
	// last saw. An observation that contradicts a stored final state is a violation only
	// when its basis is that final state (the server went back on a status the observer had
	// seen); a reading begun before the final status was learned elsewhere (another
	// connection or replica) is stale: dropped, not recorded. Empty: unknown, judged as a
	// status read sent on the stored state, except for a notification, which carries no
	// send time and is stale.
	Basis TaskState
	// Polls are status reads made since the task's stored poll count was last written; a
	// change this observation writes adds them to it (an unchanged observation writes nothing,
	// and the watcher persists them in its periodic batch instead).
	Polls int
}

// ObserveResult says what an observation changed.
type ObserveResult struct {
	// Changed is true when the stored state, message or timing changed.
	Changed bool
	// Violation is true when the change broke the state machine (recorded, not applied).
	Violation bool
	// From is the stored state before.
	From TaskState
	// Now is the stored state after.
	Now TaskState
	// BecameTerminal is true when this observation moved the task to a terminal state.
	BecameTerminal bool
	// Stale is true when the observation contradicted a final state stored after the
	// observer's reading began: nothing was written.
	Stale bool
	// PollsWritten is true when the observation's Polls were added to the stored count.
	PollsWritten bool
}

// Observe applies one observed status under a row lock: it writes only on change, records a
// violation instead of moving a stored state backwards, and appends to the timeline when the
// state or message changed.
func (s *Store) Observe(ctx context.Context, opID string, obs Observation, source string) (ObserveResult, error) {
	var res ObserveResult
	var replaced bool
	obs.StatusMessage, replaced = safetext.Clean(obs.StatusMessage)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var from TaskState
		var msg, taskID string
		var upd *time.Time
		var poll *int64
		var answered bool
		if err := tx.QueryRow(ctx, `SELECT state, status_message, coalesce(task_id, ''), server_updated_at, poll_interval_ms,
			EXISTS (SELECT 1 FROM answer_echoes WHERE operation_id = $1)
			FROM tasks WHERE operation_id = $1 FOR UPDATE`, opID).Scan(&from, &msg, &taskID, &upd, &poll, &answered); err != nil {
			return notFound(opID, err)
		}
		// A value a person answered and the server echoes in its status message is cut out
		// before it is compared, stored or put on the timeline.
		if answered && obs.StatusMessage != "" {
			echoes, err := s.echoes(ctx, tx, opID)
			if err != nil {
				return err
			}
			obs.StatusMessage = echoes.redactText(obs.StatusMessage)
		}
		res = ObserveResult{From: from, Now: from}
		// A reading the server wrote before the status stored (by its own lastUpdatedAt) is
		// stale, not a transition: a status answer overtaken by a notification or another
		// replica's read, or a notification that arrives after a newer answer.
		if from != obs.State && upd != nil && !obs.UpdatedAt.IsZero() && olderThanStored(obs, *upd, from, source) {
			res.Stale = true
			return nil
		}
		if !validTransition(from, obs.State) {
			if from.Final() && staleAgainst(from, obs, source) {
				res.Stale = true
				return nil
			}
			res.Violation = true
			if _, err := tx.Exec(ctx, `INSERT INTO transition_violations (operation_id, task_id, from_state, to_state, source) VALUES ($1,$2,$3,$4,$5)`,
				opID, taskID, from, obs.State, source); err != nil {
				return fmt.Errorf("record violation of %s: %w", opID, err)
			}
			return nil
		}
		stateChanged := from != obs.State
		msgChanged := msg != obs.StatusMessage
		// Postgres keeps microseconds: a finer server timestamp is no change.
		updChanged := !obs.UpdatedAt.IsZero() && (upd == nil || !upd.Equal(obs.UpdatedAt.Truncate(time.Microsecond)))
		pollChanged := obs.PollInterval > 0 && (poll == nil || *poll != obs.PollInterval.Milliseconds())
		if !stateChanged && !msgChanged && !updChanged && !pollChanged {
			return nil
		}
		res.Changed, res.Now, res.PollsWritten = true, obs.State, true
		res.BecameTerminal = stateChanged && obs.State.Final()
		if _, err := tx.Exec(ctx, `UPDATE tasks SET state = $2, status_message = $3, server_updated_at = coalesce($4, server_updated_at),
			poll_interval_ms = coalesce($5, poll_interval_ms),
			result_state = CASE WHEN $6 THEN 'pending' ELSE result_state END,
			terminal_at = CASE WHEN $6 THEN now() ELSE terminal_at END,
			failure_kind = NULL, first_failure_at = NULL, polls = polls + $7, updated_at = now() WHERE operation_id = $1`,
			opID, obs.State, obs.StatusMessage, nullTime(obs.UpdatedAt), nullMillis(obs.PollInterval), res.BecameTerminal, obs.Polls); err != nil {
			return fmt.Errorf("observe %s: %w", opID, err)
		}
		if stateChanged && from == StateInputRequired {
			if err := moveOnInputs(ctx, tx, opID, obs.State); err != nil {
				return err
			}
		}
		if stateChanged || msgChanged {
			if err := addTimeline(ctx, tx, opID, source, string(obs.State), obs.StatusMessage); err != nil {
				return err
			}
		}
		if replaced && msgChanged {
			return textReplaced(ctx, tx, opID, "the server's status message")
		}
		return nil
	})
	return res, err
}

// olderThanStored reports whether obs, which differs from the stored state from, was written
// by the server no later than the stored status (lastUpdatedAt upd) and read before it was
// stored: a notification (it carries no send time), or a reading begun on another state than
// the one stored. A reading begun on the stored state is newer whatever the server's clock
// says, so a server whose clocks disagree still moves on. A final status written at the same
// instant as a stored open one is not older: a task ends after it works, never before, so of
// the two the final one is the later (a server that then reports the open one again goes
// back on it, a violation recorded as such).
func olderThanStored(obs Observation, upd time.Time, from TaskState, source string) bool {
	if source != SourceNotification && (obs.Basis == "" || obs.Basis == from) {
		return false
	}
	at := obs.UpdatedAt.Truncate(time.Microsecond) // PostgreSQL keeps microseconds
	if at.Equal(upd) && obs.State.Final() && !from.Final() {
		return false
	}
	return !at.After(upd)
}

// staleAgainst reports whether obs, which contradicts the stored final state from, was read
// before from was learned (see Observation.Basis).
func staleAgainst(from TaskState, obs Observation, source string) bool {
	if obs.Basis == "" {
		return source == SourceNotification
	}
	return obs.Basis != from
}

// Unchanged reports whether an observation matches what the claimed task row already holds
// (state, status message, lastUpdatedAt to the microsecond Postgres keeps, pollInterval), so a
// watcher can skip Observe and write nothing.
func (t *Task) Unchanged(obs Observation) bool {
	if t.State != obs.State || t.StatusMessage != obs.StatusMessage {
		return false
	}
	if !obs.UpdatedAt.IsZero() && (t.ServerUpdatedAt == nil || !t.ServerUpdatedAt.Equal(obs.UpdatedAt.Truncate(time.Microsecond))) {
		return false
	}
	return obs.PollInterval <= 0 || t.PollInterval.Milliseconds() == obs.PollInterval.Milliseconds()
}

// validTransition is the task state machine over stored states: a status may repeat; working
// and input_required may go anywhere; creating may become any protocol status; final states
// never change.
func validTransition(from, to TaskState) bool {
	if from == to {
		return true
	}
	switch from {
	case StateCreating, StateWorking, StateInputRequired:
		switch to {
		case StateWorking, StateInputRequired, StateCompleted, StateFailed, StateCancelled:
			return true
		}
	}
	return false
}

// RecordFailure notes a failed status read of kind and returns when the failures began.
func (s *Store) RecordFailure(ctx context.Context, opID, kind string) (since time.Time, err error) {
	err = s.pool.QueryRow(ctx, `UPDATE tasks SET failure_kind = $2, first_failure_at = coalesce(first_failure_at, now())
		WHERE operation_id = $1 RETURNING first_failure_at`, opID, kind).Scan(&since)
	if err != nil {
		return since, notFound(opID, err)
	}
	return since, nil
}

// ClearFailure forgets failed status reads after a successful one.
func (s *Store) ClearFailure(ctx context.Context, opID string) error {
	_, err := s.pool.Exec(ctx, `UPDATE tasks SET failure_kind = NULL, first_failure_at = NULL WHERE operation_id = $1 AND first_failure_at IS NOT NULL`, opID)
	return err
}

// Due is a task claimed by a watcher. Its Operation holds the identity, workflow, route,
// domain outcome and task row only (not the request or a job).
type Due struct {
	Operation
	// DueAt is when the poll was due (for lateness).
	DueAt time.Time
	// MaxTTL is unused by the store; the watcher fills it from policy.
}

// dueColumns are what a watcher needs of a held task (scanDueWith): the operation's identity
// and workflow and the task row without the request and job columns, so a poll costs fewer
// allocations than a full read.
const dueColumns = `o.id, o.tenant, o.workflow, o.route, o.domain_outcome,
	t.server, t.tool, t.era, coalesce(t.task_id, ''), t.state, t.status_message, t.server_created_at, t.server_updated_at,
	t.ttl_ms, t.poll_interval_ms, t.deadline, t.polls, coalesce(t.failure_kind, ''), t.result_state,
	t.session_id, t.capabilities, t.server_name, t.server_version`

func scanDueWith(row pgx.Row, extra ...any) (Operation, error) {
	var o Operation
	var t Task
	var ttl, poll *int64
	dst := []any{&o.ID, &o.Tenant, &o.Workflow, &o.Route, &o.DomainOutcome,
		&t.Server, &t.Tool, &t.Era, &t.TaskID, &t.State, &t.StatusMessage, &t.ServerCreatedAt, &t.ServerUpdatedAt,
		&ttl, &poll, &t.Deadline, &t.Polls, &t.FailureKind, &t.ResultState,
		&t.sessionID, &t.capabilities, &t.serverName, &t.serverVersion}
	if err := row.Scan(append(dst, extra...)...); err != nil {
		return o, err
	}
	if ttl != nil {
		d := time.Duration(*ttl) * time.Millisecond
		t.TTL = &d
	}
	if poll != nil {
		t.PollInterval = time.Duration(*poll) * time.Millisecond
	}
	o.Task = &t
	return o, nil
}

// Reschedule sets the next poll of a task (sooner after a cancel, an answer or a notification
// seen on a replica that does not hold the task) and tells the replica holding it through a
// notification on WatchPokeChannel, since the holder keeps its tasks' due times in memory.
func (s *Store) Reschedule(ctx context.Context, opID string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `WITH u AS (UPDATE tasks SET next_poll_at = $2, held_poll_at = NULL WHERE operation_id = $1
			RETURNING operation_id, lease_owner)
		SELECT pg_notify('`+WatchPokeChannel+`', operation_id::text || ' ' || $3::text) FROM u WHERE lease_owner IS NOT NULL`,
		opID, at, strconv.FormatInt(at.UnixMilli(), 10))
	return err
}

// ReleaseLeases drops every lease replica holds, so others take its tasks at once.
func (s *Store) ReleaseLeases(ctx context.Context, replica string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE tasks t SET lease_owner = NULL, lease_expires_at = NULL,
			next_poll_at = `+NextPollSQL+`, held_poll_at = NULL WHERE lease_owner = $1`, replica); err != nil {
		return fmt.Errorf("release task leases: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE job_runs SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = $1`, replica); err != nil {
		return fmt.Errorf("release job leases: %w", err)
	}
	return nil
}

// RecordEnvelope stores the bounded result record and marks the outcome fetched. The task
// state is set to the envelope's terminal status when it was not terminal yet (legacy
// tasks/result may come first); a stored terminal state is never changed.
func (s *Store) RecordEnvelope(ctx context.Context, opID string, e Envelope, source string) error {
	// A value a person answered and the server echoed back is cut out before anything keeps
	// it, whichever replica took the answer.
	echoes, err := s.echoes(ctx, s.pool, opID)
	if err != nil {
		return err
	}
	echoes.redactEnvelope(&e)
	var r [4]bool
	e.StatusMessage, r[0] = safetext.Clean(e.StatusMessage)
	e.Preview, r[1] = safetext.Clean(e.Preview)
	e.Result, r[2] = safetext.CleanJSON(e.Result)
	e.Status, r[3] = safetext.Clean(e.Status)
	e.TextReplaced = e.TextReplaced || r[0] || r[1] || r[2] || r[3]
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO task_envelopes (operation_id, status, era, tool_error, error_code, started_at, finished_at,
			status_message, result_size, result_sha256, preview, evidence_handle, result, text_replaced)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14) ON CONFLICT (operation_id) DO NOTHING`,
			opID, e.Status, e.Era, e.ToolError, e.ErrorCode, e.StartedAt, e.FinishedAt, e.StatusMessage, e.ResultSize,
			e.ResultSHA256, e.Preview, e.EvidenceHandle, nullJSON(e.Result), e.TextReplaced)
		if err != nil {
			return fmt.Errorf("store envelope of %s: %w", opID, err)
		}
		if err := callRecorded(ctx, tx, opID); err != nil {
			return err
		}
		if tag.RowsAffected() == 1 && e.TextReplaced {
			if err := textReplaced(ctx, tx, opID, "the server's result"); err != nil {
				return err
			}
		}
		// Why it failed, in the words kept above (answers cut out), on the operation itself.
		if reason, by := e.FailureReason(); tag.RowsAffected() == 1 && reason != "" {
			if _, err := tx.Exec(ctx, `UPDATE operations SET failure_reason = $2, failure_reason_by = $3 WHERE id = $1`, opID, reason, by); err != nil {
				return fmt.Errorf("store failure reason of %s: %w", opID, err)
			}
		}
		var from TaskState
		err = tx.QueryRow(ctx, `SELECT state FROM tasks WHERE operation_id = $1 FOR UPDATE`, opID).Scan(&from)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // sync route: no task row
		}
		if err != nil {
			return notFound(opID, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE tasks SET result_state = 'fetched', tool_error = $2, next_poll_at = NULL,
			lease_owner = NULL, lease_expires_at = NULL, updated_at = now() WHERE operation_id = $1`, opID, e.ToolError); err != nil {
			return fmt.Errorf("mark result of %s fetched: %w", opID, err)
		}
		to := TaskState(e.Status)
		if !from.Final() && validTransition(from, to) {
			if _, err := tx.Exec(ctx, `UPDATE tasks SET state = $2, terminal_at = coalesce(terminal_at, now()) WHERE operation_id = $1`, opID, to); err != nil {
				return err
			}
			return addTimeline(ctx, tx, opID, source, string(to), e.StatusMessage)
		}
		return nil
	})
}

// RecordSyncAnswer records a synchronous start's answer in one statement (one commit): the
// envelope, the call marked recorded, the timeline entry (event, message) and the start's
// first answer. It returns the first answer stored: this one, unless one was stored before. ok
// is false, with nothing written, when the envelope's text must be replaced: RecordEnvelope
// then keeps it with its reconciliation item. A start's own call has no answered input whose
// echo could need cutting out.
func (s *Store) RecordSyncAnswer(ctx context.Context, opID string, e Envelope, event, message string, a FirstAnswer) (FirstAnswer, bool, error) {
	var r [5]bool
	e.StatusMessage, r[0] = safetext.Clean(e.StatusMessage)
	e.Preview, r[1] = safetext.Clean(e.Preview)
	e.Result, r[2] = safetext.CleanJSON(e.Result)
	e.Status, r[3] = safetext.Clean(e.Status)
	message, r[4] = safetext.Clean(message)
	if e.TextReplaced || r != [5]bool{} {
		return FirstAnswer{}, false, nil
	}
	body, err := json.Marshal(a.Body)
	if err != nil {
		return FirstAnswer{}, false, err
	}
	var st int
	var raw []byte
	err = s.writes.row(ctx, func(row pgx.Row) error { return row.Scan(&st, &raw) },
		`WITH e AS (INSERT INTO task_envelopes (operation_id, status, era, tool_error, error_code, started_at, finished_at,
			status_message, result_size, result_sha256, preview, evidence_handle, result, text_replaced)
			VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,false) ON CONFLICT (operation_id) DO NOTHING),
		c AS (DELETE FROM operation_calls WHERE operation_id = $1),
		o AS (UPDATE operations SET response_status = coalesce(response_status, $17),
				response_body = CASE WHEN response_status IS NULL THEN $18 ELSE response_body END
			WHERE id = $1 RETURNING response_status, response_body),
		tl AS (INSERT INTO task_timeline (operation_id, source, state, message) VALUES ($1, $14, $15, $16))
		SELECT response_status, response_body FROM o`,
		opID, e.Status, e.Era, e.ToolError, e.ErrorCode, e.StartedAt, e.FinishedAt, e.StatusMessage, e.ResultSize,
		e.ResultSHA256, e.Preview, e.EvidenceHandle, nullJSON(e.Result), SourceCreate, event, message, a.Status, body)
	if err != nil {
		return FirstAnswer{}, false, fmt.Errorf("record sync answer of %s: %w", opID, notFound(opID, err))
	}
	out := FirstAnswer{Status: st}
	if err := json.Unmarshal(raw, &out.Body); err != nil {
		return FirstAnswer{}, false, fmt.Errorf("decode response of %s: %w", opID, err)
	}
	return out, true, nil
}

// MarkResultFailed records that the outcome could not be fetched within the result budget; the
// domain outcome becomes unknown and goes to reconciliation.
func (s *Store) MarkResultFailed(ctx context.Context, opID, message string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tasks SET result_state = 'failed', next_poll_at = NULL, lease_owner = NULL,
			lease_expires_at = NULL WHERE operation_id = $1`, opID); err != nil {
			return err
		}
		if err := addTimeline(ctx, tx, opID, SourceWatcher, "result_unavailable", message); err != nil {
			return err
		}
		return markUnknown(ctx, tx, opID, "", ReasonResultUnavailable, message)
	})
}

// UpsertInputs stores input requests (field names and types only); keys seen before are kept.
// It returns how many were new.
func (s *Store) UpsertInputs(ctx context.Context, opID string, in []PendingInput) (int, error) {
	n := 0
	// A later question quoting an earlier answer has it cut out, as status messages do.
	echoes, err := s.echoes(ctx, s.pool, opID)
	if err != nil {
		return 0, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, p := range in {
			fields, err := json.Marshal(p.Fields)
			if err != nil {
				return err
			}
			fields, _ = safetext.CleanJSON(fields)
			p.Key, _ = safetext.Clean(p.Key)
			p.Message, _ = safetext.Clean(p.Message)
			p.Message = echoes.redactText(p.Message)
			p.Mode, _ = safetext.Clean(p.Mode)
			p.Title, _ = safetext.Clean(p.Title)
			p.Description, _ = safetext.Clean(p.Description)
			var schema any // SQL NULL when the question has no schema, or one too large to keep
			if len(p.RequestedSchema) > 0 && len(p.RequestedSchema) <= MaxSchemaBytes && json.Valid(p.RequestedSchema) {
				clean, _ := safetext.CleanJSON(p.RequestedSchema)
				schema = string(clean)
			}
			tag := tx.QueryRow(ctx, `INSERT INTO pending_inputs (operation_id, input_key, method, mode, message, fields, redaction_class, expires_at,
				title, description, requested_schema)
				VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11::jsonb)
				ON CONFLICT (operation_id, input_key) DO UPDATE SET state = 'open', expires_at = excluded.expires_at
				WHERE pending_inputs.state IN ('expired', 'moved_on') AND pending_inputs.answered_at IS NULL
				RETURNING xmax = 0`,
				opID, p.Key, p.Method, p.Mode, p.Message, fields, p.RedactionClass, p.ExpiresAt, p.Title, p.Description, schema)
			// A question closed unanswered that the server asks again is waited for again: it
			// reopens, answerable, under the same key.
			var inserted bool
			switch err := tag.Scan(&inserted); {
			case errors.Is(err, pgx.ErrNoRows):
				continue
			case err != nil:
				return fmt.Errorf("store input %q of %s: %w", p.Key, opID, err)
			}
			n++
			msg := "input requested: " + p.Key
			if !inserted {
				msg = "input requested again, open again: " + p.Key
			}
			if err := addTimeline(ctx, tx, opID, SourceWatcher, "input_requested", msg); err != nil {
				return err
			}
		}
		return nil
	})
	return n, err
}

// MarkInputAnswered records who answered an input and how (the action, never the values).
func (s *Store) MarkInputAnswered(ctx context.Context, opID, key, by, action string, also ...TxFunc) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE pending_inputs SET state = 'answered', answered_at = now(), answered_by = $3, answer_action = $4
			WHERE operation_id = $1 AND input_key = $2 AND state IN ('open', 'moved_on') AND answered_at IS NULL`, opID, key, by, action)
		if err != nil {
			return fmt.Errorf("mark input %q of %s answered: %w", key, opID, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("input %q of %s: %w", key, opID, ErrNoPendingInput)
		}
		if err := addPersonTimeline(ctx, tx, opID, by, "input_answered", fmt.Sprintf("input %s answered (%s) by %s", key, action, by)); err != nil {
			return err
		}
		return runAlso(ctx, tx, also)
	})
}

// RequestCancel records a cancel request (who, why) before it is sent.
func (s *Store) RequestCancel(ctx context.Context, opID, by, reason string, also ...TxFunc) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tasks SET cancel_requested_at = coalesce(cancel_requested_at, now()),
			cancel_requested_by = coalesce(cancel_requested_by, $2), cancel_reason = coalesce(cancel_reason, $3) WHERE operation_id = $1`, opID, by, reason); err != nil {
			return fmt.Errorf("record cancel of %s: %w", opID, err)
		}
		if err := addPersonTimeline(ctx, tx, opID, by, "cancel_requested", "cancel requested by "+by+": "+reason); err != nil {
			return err
		}
		return runAlso(ctx, tx, also)
	})
}

// AckCancel records that the server acknowledged a cancel request.
func (s *Store) AckCancel(ctx context.Context, opID string, also ...TxFunc) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE tasks SET cancel_acknowledged_at = coalesce(cancel_acknowledged_at, now()) WHERE operation_id = $1`, opID); err != nil {
			return err
		}
		if err := addTimeline(ctx, tx, opID, SourceCancelReply, "cancel_acknowledged", "the server acknowledged the cancel request"); err != nil {
			return err
		}
		return runAlso(ctx, tx, also)
	})
}

// dueJob is a job a watcher pass claimed: its operation, job API, job id and workflow.
type dueJob struct{ op, base, job, workflow string }

func collectDueJobs(rows pgx.Rows) ([]dueJob, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (dueJob, error) {
		var d dueJob
		var wf *string
		err := r.Scan(&d.op, &d.base, &d.job, &wf)
		if wf != nil {
			d.workflow = *wf
		}
		return d, err
	})
}
