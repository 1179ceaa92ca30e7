package reconcile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/inflight"
	"github.com/taskgate/taskgate/internal/lifecycle"
)

// Config configures the verification Service. Zero values take the documented defaults.
type Config struct {
	// Pool is the database (required).
	Pool *pgxpool.Pool
	// Policy gives each workflow's verifier and reconciliation budget (required).
	Policy *config.Config
	// Lookup asks the systems of record (default: a plain client, no demo receiver).
	Lookup Lookup
	// ReplicaID names this replica in verification leases (default hostname-random).
	ReplicaID string
	// BatchSize is how many checks and how many items one pass claims each (default 32).
	BatchSize int
	// Interval is the pause between passes (default 1s).
	Interval time.Duration
	// Lease is how long a claimed check or item stays with this replica (default 1m).
	Lease time.Duration
	// Backoff is the first re-verification delay; it doubles per attempt (default 5s).
	Backoff time.Duration
	// MaxBackoff caps the delay (default 10m).
	MaxBackoff time.Duration
	// MaxAttempts is how many automatic verifications an item gets before a person is asked
	// (default 5).
	MaxAttempts int
	// PassTimeout bounds one pass (default 30s).
	PassTimeout time.Duration
	// Logger receives logs; receipts and credentials are never logged (default: discard).
	Logger *slog.Logger
	// AfterPass, when set, is called after every pass with how many checks and items it handled.
	AfterPass func(handled int)
}

func (c *Config) validate() error {
	if c.Pool == nil || c.Policy == nil {
		return errors.New("reconcile: Pool and Policy are required")
	}
	if c.ReplicaID == "" {
		h, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.ReplicaID = h + "-" + hex.EncodeToString(b[:])
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 32
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Interval, time.Second)
	def(&c.Lease, time.Minute)
	def(&c.Backoff, 5*time.Second)
	def(&c.MaxBackoff, 10*time.Minute)
	def(&c.PassTimeout, 30*time.Second)
	if c.MaxBackoff < c.Backoff {
		return fmt.Errorf("reconcile: MaxBackoff %v shorter than Backoff %v", c.MaxBackoff, c.Backoff)
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.Lookup.Client == nil {
		c.Lookup.Client = &http.Client{Transport: http.DefaultTransport}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Service verifies outcomes after terminal tasks, sync answers and job answers, and re-verifies
// open items with backoff until they settle or a person is asked. Replicas share the work
// through leases claimed with FOR UPDATE SKIP LOCKED.
type Service struct {
	cfg Config
	log *slog.Logger

	life lifecycle.Loop
	// inflight bounds the verifications in flight; work waits for them when the loop ends.
	inflight *inflight.Bound
	work     sync.WaitGroup
}

// New validates cfg and returns a stopped Service.
func New(cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "reconcile", "replica", cfg.ReplicaID),
		inflight: &inflight.Bound{Total: maxVerifications, PerKey: maxVerificationsPerSystem}}, nil
}

// Start starts the loop; it returns an error if the service is running.
func (s *Service) Start(ctx context.Context) error {
	if err := s.life.Start(ctx, s.loop); err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for the pass in progress. It is idempotent.
func (s *Service) Stop() {
	s.life.Stop()
}

func (s *Service) loop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	// Stop waits for the verifications the passes started; ctx ending cuts them short, and a
	// check or item cut short stays leased until its lease ends.
	defer s.work.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := s.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Error("reconcile pass", "err", err)
		}
		if s.cfg.AfterPass != nil {
			s.cfg.AfterPass(n)
		}
		t.Reset(s.cfg.Interval)
	}
}

// runOnce finds operations to verify and claims a batch of them, then a batch of due items,
// as many as this process has verifications free, and starts verifying each beside the loop,
// under the loop's context. It returns how many checks and items it claimed.
func (s *Service) runOnce(ctx context.Context) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.PassTimeout)
	defer cancel()
	if err := s.enqueue(pctx); err != nil {
		return 0, err
	}
	free := s.inflight.Reserve(s.cfg.BatchSize)
	checks, err := s.claimChecks(pctx, free)
	s.inflight.Release(free - len(checks))
	if err != nil {
		return 0, err
	}
	for _, c := range checks {
		s.work.Go(func() {
			defer s.inflight.Release(1)
			if err := s.check(ctx, c); err != nil && ctx.Err() == nil {
				s.log.Error("verify operation", "operation", c.opID, "err", err)
			}
		})
	}
	free = s.inflight.Reserve(s.cfg.BatchSize)
	items, err := s.claimItems(pctx, free)
	s.inflight.Release(free - len(items))
	if err != nil {
		return len(checks), err
	}
	for _, it := range items {
		s.work.Go(func() {
			defer s.inflight.Release(1)
			if err := s.reverify(ctx, it); err != nil && ctx.Err() == nil {
				s.log.Error("re-verify item", "item", it.pub, "err", err)
			}
		})
	}
	return len(checks) + len(items), nil
}

// enqueue adds an outcome check for every operation still pending whose task ended (and its
// outcome was fetched or given up), whose sync call was answered, or whose job ended.
func (s *Service) enqueue(ctx context.Context) error {
	_, err := s.cfg.Pool.Exec(ctx, `
		INSERT INTO outcome_checks (operation_id, tenant, trigger)
		SELECT o.id, o.tenant, CASE o.route WHEN 'task' THEN 'task_terminal' WHEN 'sync' THEN 'sync_answer' ELSE 'job_answer' END
		FROM operations o
		LEFT JOIN tasks t ON t.operation_id = o.id
		LEFT JOIN job_runs j ON j.operation_id = o.id
		WHERE o.domain_outcome = 'pending' AND (
			(o.route = 'task' AND t.state IN ('completed', 'failed', 'cancelled') AND t.result_state IN ('fetched', 'failed'))
			OR (o.route = 'sync' AND EXISTS (SELECT 1 FROM task_envelopes e WHERE e.operation_id = o.id))
			OR (o.route = 'job_api' AND j.status IN ('succeeded', 'failed')))
		ON CONFLICT (operation_id) DO NOTHING`)
	if err != nil {
		return fmt.Errorf("find operations to verify: %w", err)
	}
	return nil
}

type check struct{ opID, trigger string }

func (s *Service) claimChecks(ctx context.Context, n int) ([]check, error) {
	if n <= 0 {
		return nil, nil
	}
	rows, err := s.cfg.Pool.Query(ctx, `
		WITH due AS (SELECT operation_id FROM outcome_checks
			WHERE done_at IS NULL AND next_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at < now())
			ORDER BY next_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE outcome_checks c SET lease_owner = $1, lease_expires_at = now() + $3 * interval '1 millisecond'
		FROM due WHERE c.operation_id = due.operation_id RETURNING c.operation_id, c.trigger`,
		s.cfg.ReplicaID, n, s.cfg.Lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("claim outcome checks: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (check, error) {
		var c check
		return c, r.Scan(&c.opID, &c.trigger)
	})
	if err != nil {
		return nil, fmt.Errorf("claim outcome checks: %w", err)
	}
	return out, nil
}

// facts are what a verification needs to know about an operation.
type facts struct {
	tenant, workflow, route, outcome, taskState string
	toolError                                   bool
	jobID, jobBase                              string
}

func (s *Service) facts(ctx context.Context, opID string) (facts, error) {
	var f facts
	err := s.cfg.Pool.QueryRow(ctx, `SELECT o.tenant, o.workflow, o.route, o.domain_outcome, coalesce(t.state, ''),
		coalesce(t.tool_error, false), coalesce(j.job_id, ''), coalesce(j.base_url, '')
		FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id LEFT JOIN job_runs j ON j.operation_id = o.id WHERE o.id = $1`, opID).
		Scan(&f.tenant, &f.workflow, &f.route, &f.outcome, &f.taskState, &f.toolError, &f.jobID, &f.jobBase)
	if err != nil {
		return f, fmt.Errorf("operation %s: %w", opID, err)
	}
	return f, nil
}

func (s *Service) workflow(name string) *config.Workflow {
	if wf, ok := s.cfg.Policy.Workflow(name); ok {
		return wf
	}
	return &config.Workflow{Name: name, Verifier: config.Verifier{Kind: KindNone}}
}

// ask verifies under the workflow's reconciliation budget: one attempt plus the budget's
// retries while the system of record cannot be reached.
func (s *Service) ask(ctx context.Context, opID string, f facts) (Answer, int, error) {
	wf := s.workflow(f.workflow)
	system := systemOf(wf, f)
	if !s.inflight.Enter(system) {
		return Answer{}, 0, errSystemBusy
	}
	defer s.inflight.Leave(system)
	sub := Subject{OperationID: opID, Workflow: wf, JobID: f.jobID, JobBase: f.jobBase}
	var a Answer
	var err error
	attempt := 0
	for attempt < 1+max(0, wf.Budgets.Reconcile.Retries) {
		attempt++
		a, err = s.cfg.Lookup.Verify(ctx, sub, wf.Budgets.Reconcile)
		if err != nil || a.Outcome != OutcomeUnknown || (a.HTTPStatus != 0 && a.HTTPStatus < 500) || ctx.Err() != nil {
			break
		}
	}
	return a, attempt, err
}

func sourceOf(wf *config.Workflow) string {
	switch wf.Verifier.Kind {
	case KindHTTP, KindJobAPI:
		return wf.Verifier.Kind
	}
	return KindNone
}

func recordAnswer(ctx context.Context, q Querier, opID string, item *int64, tenant, source, trigger string, a Answer, attempt int) error {
	var st *int
	if a.HTTPStatus != 0 {
		st = &a.HTTPStatus
	}
	if _, err := q.Exec(ctx, `INSERT INTO outcome_verifications (operation_id, item_id, tenant, source, trigger, answer, receipt, detail, http_status, attempt)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`, opID, item, tenant, source, trigger, a.Outcome, truncate(a.Receipt, 500),
		truncate(a.Detail, 1000), st, attempt); err != nil {
		return fmt.Errorf("record verification of %s: %w", opID, err)
	}
	return nil
}

// Mismatch is the one rule by which a task state and a domain outcome disagree (the
// operations package's Mismatch and MismatchSQL say the same): the server said the work failed
// or was cancelled, or the tool answered with an error, while the system of record confirms the
// effect applied; or the server said it completed without a tool error while the system of
// record confirms it did not apply. A tool error confirmed "not applied" is agreement, as a
// failed task confirmed "not applied" is. Open states and outcomes still pending or unknown
// never disagree. toolError counts only for a completed task (a 2026-07-28 server ends an
// isError result completed; a 2025-11-25 one ends it failed).
func Mismatch(taskState string, toolError bool, outcome string) bool {
	switch {
	case taskState == "failed", taskState == "cancelled", taskState == "completed" && toolError:
		return outcome == string(OutcomeApplied)
	case taskState == "completed":
		return outcome == string(OutcomeNotApplied)
	}
	return false
}

// unverifiedReason is the item reason for an outcome the verifier could not confirm.
func unverifiedReason(taskState string) Reason {
	switch taskState {
	case "failed":
		return ReasonTaskFailedUnverified
	case "cancelled":
		return ReasonTaskCancelledUnverified
	}
	return ReasonVerifierUnknown
}

// check verifies one operation after its task, sync call or job ended.
func (s *Service) check(ctx context.Context, c check) error {
	f, err := s.facts(ctx, c.opID)
	if err != nil {
		return err
	}
	wf := s.workflow(f.workflow)
	src := sourceOf(wf)
	var a Answer
	attempt := 1
	if f.outcome == "pending" {
		var verr error
		a, attempt, verr = s.ask(ctx, c.opID, f)
		if errors.Is(verr, errSystemBusy) {
			// Unasked: a later pass takes it again.
			_, err := s.cfg.Pool.Exec(ctx, `UPDATE outcome_checks SET lease_owner = NULL, lease_expires_at = NULL
				WHERE operation_id = $1 AND lease_owner = $2 AND done_at IS NULL`, c.opID, s.cfg.ReplicaID)
			return err
		}
		if verr != nil && !errors.Is(verr, ErrNoVerifier) {
			return verr
		}
	}
	return pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE outcome_checks SET done_at = now(), lease_owner = NULL, lease_expires_at = NULL
			WHERE operation_id = $1 AND lease_owner = $2 AND done_at IS NULL`, c.opID, s.cfg.ReplicaID)
		if err != nil {
			return fmt.Errorf("finish check of %s: %w", c.opID, err)
		}
		if tag.RowsAffected() == 0 || f.outcome != "pending" {
			return nil // lost the lease, or settled meanwhile
		}
		if src == KindNone && wf.Effect == config.EffectReadOnly {
			// A read-only workflow has no effect to confirm: no answer is recorded, the outcome
			// becomes no_effect (nothing applied, nothing unknown) and the timeline says why.
			if err := settleWithout(ctx, tx, c.opID, OutcomeNoEffect); err != nil {
				return err
			}
			return timeline(ctx, tx, c.opID, sourceVerifier, "no_effect_to_verify", "no effect to verify: read-only workflow without an outcome verifier")
		}
		if src == KindNone && !wf.Verifier.Manual && f.taskState != "failed" && f.taskState != "cancelled" {
			// No verifier and no manual verification asked: the work ended unverified, listed
			// and filterable, without an item for every success.
			if err := settleWithout(ctx, tx, c.opID, OutcomeUnverified); err != nil {
				return err
			}
			return timeline(ctx, tx, c.opID, sourceVerifier, "unverified", "no outcome verifier: the outcome is unverified ("+manualDetail(c.trigger, f)+")")
		}
		if err := recordAnswer(ctx, tx, c.opID, nil, f.tenant, src, c.trigger, a, attempt); err != nil {
			return err
		}
		switch {
		case a.Outcome == OutcomeApplied || a.Outcome == OutcomeNotApplied:
			if err := setOutcome(ctx, tx, c.opID, string(a.Outcome), src, a.Receipt); err != nil {
				return err
			}
			if err := timeline(ctx, tx, c.opID, sourceVerifier, "verified", "verifier ("+src+"): "+string(a.Outcome)); err != nil {
				return err
			}
			if Mismatch(f.taskState, f.toolError, string(a.Outcome)) {
				_, err := OpenTx(ctx, tx, c.opID, ReasonTaskDomainMismatch, fmt.Sprintf("task %s but the system of record says %s", f.taskState, a.Outcome))
				return err
			}
			return nil
		case src == KindNone && f.taskState != "failed" && f.taskState != "cancelled":
			// Manual only: the task completed, the sync call answered or the job ended, and
			// nothing but a person can confirm whether the effect happened.
			if err := markUnknown(ctx, tx, c.opID, ReasonManualVerification); err != nil {
				return err
			}
			if err := timeline(ctx, tx, c.opID, sourceVerifier, "manual_verification", "no outcome verifier: a person confirms the outcome"); err != nil {
				return err
			}
			_, err := OpenTx(ctx, tx, c.opID, ReasonManualVerification, manualDetail(c.trigger, f))
			return err
		default:
			if err := markUnknown(ctx, tx, c.opID, unverifiedReason(f.taskState)); err != nil {
				return err
			}
			_, err := OpenTx(ctx, tx, c.opID, unverifiedReason(f.taskState), a.Detail)
			return err
		}
	})
}

// manualDetail says, for a manual verification item, what ended and what to check.
func manualDetail(trigger string, f facts) string {
	what := "the call ended"
	switch trigger {
	case "task_terminal":
		what = "the task ended " + f.taskState
	case "sync_answer":
		what = "the synchronous call answered"
	case "job_answer":
		what = "the job ended"
	}
	return what + "; the workflow has no outcome verifier, so check the system of record and resolve with what it shows"
}

// markUnknown sets an operation's outcome to unknown and flags it for reconciliation.
// settleWithout gives a pending operation an outcome no verifier confirmed (no_effect,
// unverified): nothing for a person to do.
func settleWithout(ctx context.Context, q Querier, opID string, outcome string) error {
	if _, err := q.Exec(ctx, `UPDATE operations SET domain_outcome = $2, updated_at = now() WHERE id = $1 AND domain_outcome = 'pending'`,
		opID, outcome); err != nil {
		return fmt.Errorf("settle %s as %s: %w", opID, outcome, err)
	}
	return nil
}

func markUnknown(ctx context.Context, q Querier, opID string, reason Reason) error {
	if _, err := q.Exec(ctx, `UPDATE operations SET domain_outcome = 'unknown', attention = 'needs_reconciliation', attention_reason = $2,
		updated_at = now() WHERE id = $1 AND domain_outcome IN ('pending', 'unknown')`, opID, reason); err != nil {
		return fmt.Errorf("mark %s unknown: %w", opID, err)
	}
	return nil
}

type dueItem struct {
	id       int64
	pub      string
	opID     string
	attempts int
}

func (s *Service) claimItems(ctx context.Context, n int) ([]dueItem, error) {
	if n <= 0 {
		return nil, nil
	}
	rows, err := s.cfg.Pool.Query(ctx, `
		WITH due AS (SELECT id FROM reconciliation_items
			WHERE state = 'verifying' AND closed_at IS NULL AND next_verify_at <= now()
			  AND (verify_lease_expires_at IS NULL OR verify_lease_expires_at < now())
			ORDER BY next_verify_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		UPDATE reconciliation_items r SET verify_owner = $1, verify_lease_expires_at = now() + $3 * interval '1 millisecond',
			attempts = r.attempts + 1
		FROM due WHERE r.id = due.id RETURNING r.id, r.public_id::text, r.operation_id, r.attempts`,
		s.cfg.ReplicaID, n, s.cfg.Lease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("claim due items: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (dueItem, error) {
		var d dueItem
		return d, r.Scan(&d.id, &d.pub, &d.opID, &d.attempts)
	})
	if err != nil {
		return nil, fmt.Errorf("claim due items: %w", err)
	}
	return out, nil
}

// mayStillApply reports a reason under which the call may still be running somewhere: a
// not_applied answer then only says "not yet" and settles nothing; only applied does, or a person.
func mayStillApply(r string) bool {
	switch r {
	case ReasonCreateUnacknowledged, ReasonSyncTimeout, ReasonSyncTransportLost, ReasonJobUnacknowledged,
		ReasonTaskUnobservable, ReasonSessionGone:
		return true
	}
	return false
}

// backoff is the delay before attempt n+1.
func (s *Service) backoff(n int) time.Duration {
	d := s.cfg.Backoff
	for i := 1; i < n && d < s.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, s.cfg.MaxBackoff)
}

// reverify asks the system of record again about an open item: a confirmed answer settles
// it; otherwise it is tried again after a backoff, and after MaxAttempts (at once when the
// workflow has no verifier) a person is asked.
func (s *Service) reverify(ctx context.Context, d dueItem) error {
	f, err := s.facts(ctx, d.opID)
	if err != nil {
		return err
	}
	wf := s.workflow(f.workflow)
	src := sourceOf(wf)
	a, attempt, verr := s.ask(ctx, d.opID, f)
	if errors.Is(verr, errSystemBusy) {
		// Unasked: the claim's attempt is taken back and a later pass takes it again.
		_, err := s.cfg.Pool.Exec(ctx, `UPDATE reconciliation_items SET attempts = greatest(attempts - 1, 0), verify_owner = NULL,
			verify_lease_expires_at = NULL WHERE id = $1 AND verify_owner = $2`, d.id, s.cfg.ReplicaID)
		return err
	}
	if verr != nil && !errors.Is(verr, ErrNoVerifier) {
		return verr
	}
	return pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		var reason string
		err := tx.QueryRow(ctx, `SELECT reason FROM reconciliation_items WHERE id = $1 AND closed_at IS NULL AND state = 'verifying'
			AND verify_owner = $2 FOR UPDATE`, d.id, s.cfg.ReplicaID).Scan(&reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // resolved by a person, or taken over
		}
		if err != nil {
			return fmt.Errorf("lock item %s: %w", d.pub, err)
		}
		if err := recordAnswer(ctx, tx, d.opID, &d.id, f.tenant, src, "reverify", a, attempt); err != nil {
			return err
		}
		switch {
		case a.Outcome == OutcomeApplied || a.Outcome == OutcomeNotApplied && !mayStillApply(reason):
			if _, err := tx.Exec(ctx, `UPDATE reconciliation_items SET state = 'settled', closed_at = now(), closed_by = $2,
				resolution = $3, next_verify_at = NULL, verify_owner = NULL, verify_lease_expires_at = NULL,
				claimed_by = NULL, claimed_at = NULL, claim_expires_at = NULL WHERE id = $1`, d.id, "verifier:"+src, a.Outcome); err != nil {
				return fmt.Errorf("settle item %s: %w", d.pub, err)
			}
			if err := setOutcome(ctx, tx, d.opID, string(a.Outcome), src, a.Receipt); err != nil {
				return err
			}
			if err := timeline(ctx, tx, d.opID, sourceVerifier, "verified", "verifier ("+src+"): "+string(a.Outcome)+" after "+reason); err != nil {
				return err
			}
			if err := audit.Record(ctx, tx, audit.Entry{Actor: SystemActor, Tenant: f.tenant, Action: "reconcile.settle", Target: target(d.pub),
				After: map[string]any{"outcome": a.Outcome, "source": src, "attempts": d.attempts}, Reason: a.Detail}); err != nil {
				return err
			}
			if Mismatch(f.taskState, f.toolError, string(a.Outcome)) {
				_, err := OpenTx(ctx, tx, d.opID, ReasonTaskDomainMismatch, fmt.Sprintf("task %s but the system of record says %s", f.taskState, a.Outcome))
				return err
			}
			return nil
		case src == KindNone || d.attempts >= s.cfg.MaxAttempts:
			if _, err := tx.Exec(ctx, `UPDATE reconciliation_items SET state = 'needs_person', next_verify_at = NULL,
				verify_owner = NULL, verify_lease_expires_at = NULL WHERE id = $1`, d.id); err != nil {
				return fmt.Errorf("escalate item %s: %w", d.pub, err)
			}
			return audit.Record(ctx, tx, audit.Entry{Actor: SystemActor, Tenant: f.tenant, Action: "reconcile.escalate", Target: target(d.pub),
				After: map[string]any{"state": StateNeedsPerson, "attempts": d.attempts, "source": src}, Reason: a.Detail})
		default:
			if _, err := tx.Exec(ctx, `UPDATE reconciliation_items SET next_verify_at = now() + $2 * interval '1 millisecond',
				verify_owner = NULL, verify_lease_expires_at = NULL WHERE id = $1`, d.id, s.backoff(d.attempts).Milliseconds()); err != nil {
				return fmt.Errorf("reschedule item %s: %w", d.pub, err)
			}
			return nil
		}
	})
}
