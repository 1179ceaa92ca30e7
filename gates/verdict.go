package gates

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Evidence states of a workflow's gate, as the rollout controller sees them.
const (
	// EvidenceCurrent: the latest run matches every binding.
	EvidenceCurrent = "current"
	// EvidenceStale: a binding changed (or the run was voided) since the latest run.
	EvidenceStale = "stale"
	// EvidenceMissing: no run was ever stored for the workflow.
	EvidenceMissing = "missing"
)

// Status is the gate evidence of a workflow for a binding.
type Status struct {
	// State is current, stale or missing.
	State string `json:"state"`
	// Passing is true only when the evidence is current and the run passed with no hard
	// failure: the one condition under which promotion may proceed.
	Passing bool `json:"passing"`
	// Run is the latest run considered (nil when missing).
	Run *Summary `json:"run,omitempty"`
	// Reasons say, in words, why the evidence is stale, missing or not passing.
	Reasons []string `json:"reasons,omitempty"`
}

// Latest returns the gate evidence of b.Workflow compared with b: the manifest fingerprint,
// the deviation fingerprint ("" = not compared: the caller takes the run's own), the build
// and the pins. It is the call the rollout controller makes before promoting.
func (s *Store) Latest(ctx context.Context, b Binding) (Status, error) {
	sum, err := scanSummary(s.pool.QueryRow(ctx, `SELECT `+summaryCols+` FROM gate_runs
		WHERE workflow = $1 AND error = '' ORDER BY id DESC LIMIT 1`, b.Workflow))
	if errors.Is(err, pgx.ErrNoRows) {
		return Status{State: EvidenceMissing, Reasons: []string{"no gate run for workflow " + b.Workflow}}, nil
	}
	if err != nil {
		return Status{}, fmt.Errorf("latest gate run of %s: %w", b.Workflow, err)
	}
	st := Status{State: EvidenceCurrent, Run: &sum}
	stale := func(format string, args ...any) {
		st.State = EvidenceStale
		st.Reasons = append(st.Reasons, fmt.Sprintf(format, args...))
	}
	if sum.VoidedAt != nil {
		stale("run %d was voided: %s", sum.ID, sum.VoidedReason)
	}
	if b.ManifestFingerprint != sum.ManifestFingerprint {
		stale("manifest fingerprint %s, the run tested %s", short(b.ManifestFingerprint), short(sum.ManifestFingerprint))
	}
	if b.DeviationFingerprint != "" && b.DeviationFingerprint != sum.DeviationFingerprint {
		stale("deviation fingerprint %s, the run recorded %s", short(b.DeviationFingerprint), short(sum.DeviationFingerprint))
	}
	if b.Build != sum.Build {
		stale("build %s, the run tested build %s", b.Build, sum.Build)
	}
	if b.PinsKey() != sum.PinsKey() {
		stale("pins changed since run %d", sum.ID)
	}
	if b.Server != "" && b.Server != sum.Server {
		stale("gate target %s, the run tested %s", b.Server, sum.Server)
	}
	switch {
	case len(sum.HardFailures) > 0:
		st.Reasons = append(st.Reasons, fmt.Sprintf("run %d failed hard gates: %v", sum.ID, sum.HardFailures))
	case sum.Verdict != Pass:
		st.Reasons = append(st.Reasons, fmt.Sprintf("run %d ended %s (%d failed, %d inconclusive)", sum.ID, sum.Verdict, sum.Failed, sum.Inconclusive))
	}
	st.Passing = st.State == EvidenceCurrent && sum.Verdict == Pass && len(sum.HardFailures) == 0
	return st, nil
}

func short(fp string) string {
	if fp == "" {
		return "(none)"
	}
	if len(fp) > 16 {
		return fp[:16]
	}
	return fp
}

// ErrorBackoff is how long Recheck waits after a run that could not reach the server before
// it queues another.
var ErrorBackoff = 10 * time.Minute

// Recheck compares b with the workflow's evidence; when a binding changed it voids the
// latest run and queues a new one (once: an open queue item is not duplicated). It returns
// the status as it was and whether a run was queued.
func (s *Store) Recheck(ctx context.Context, b Binding) (Status, bool, error) {
	st, err := s.Latest(ctx, b)
	if err != nil || st.State == EvidenceCurrent {
		return st, false, err
	}
	reason := "no gate run yet"
	if len(st.Reasons) > 0 {
		reason = st.Reasons[0]
	}
	// A run that could not reach the server lately is not repeated every pass.
	var recentError bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM gate_runs WHERE workflow = $1 AND error <> ''
		AND finished_at > now() - $2 * interval '1 millisecond')`, b.Workflow, ErrorBackoff.Milliseconds()).Scan(&recentError); err != nil {
		return st, false, err
	}
	if recentError {
		st.Reasons = append(st.Reasons, "the last run could not reach the server; the next is queued after "+ErrorBackoff.String())
		return st, false, nil
	}
	if st.Run != nil && st.Run.VoidedAt == nil {
		if _, err := s.pool.Exec(ctx, `UPDATE gate_runs SET voided_at = now(), voided_reason = $2 WHERE id = $1 AND voided_at IS NULL`,
			st.Run.ID, inert(reason, 1000)); err != nil {
			return st, false, err
		}
		if _, err := s.pool.Exec(ctx, `UPDATE gate_verdicts SET voided_at = now(), void_reason = $2 WHERE workflow = $1 AND voided_at IS NULL`,
			b.Workflow, inert(reason, 1000)); err != nil {
			return st, false, err
		}
	}
	server := b.Server
	if server == "" && st.Run != nil {
		server = st.Run.Server
	}
	queued, err := s.Enqueue(ctx, b.Workflow, server, reason)
	return st, queued, err
}

// QueueItem is a queued repeat run.
type QueueItem struct {
	ID         int64      `json:"id"`
	Workflow   string     `json:"workflow"`
	Server     string     `json:"server"`
	Reason     string     `json:"reason"`
	QueuedAt   time.Time  `json:"queued_at"`
	LeaseOwner string     `json:"lease_owner,omitempty"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
}

// Enqueue queues a run of the workflow's gate unless one is already open. It reports whether
// a new item was queued.
func (s *Store) Enqueue(ctx context.Context, workflow, server, reason string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO gate_queue (workflow, server, reason) VALUES ($1, $2, $3)
		ON CONFLICT (workflow, server) WHERE done_at IS NULL DO NOTHING`, workflow, server, inert(reason, 1000))
	if err != nil {
		return false, fmt.Errorf("queue gate run of %s: %w", workflow, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Queue lists the open queue items, oldest first.
func (s *Store) Queue(ctx context.Context) ([]QueueItem, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, workflow, server, reason, queued_at, coalesce(lease_owner, ''), lease_until
		FROM gate_queue WHERE done_at IS NULL ORDER BY queued_at, id LIMIT 200`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []QueueItem
	for rows.Next() {
		var q QueueItem
		if err := rows.Scan(&q.ID, &q.Workflow, &q.Server, &q.Reason, &q.QueuedAt, &q.LeaseOwner, &q.LeaseUntil); err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, rows.Err()
}

// Claim takes the oldest open item whose lease is free or expired, for owner, for lease.
// It returns ErrNotFound when nothing is due.
func (s *Store) Claim(ctx context.Context, owner string, lease time.Duration) (QueueItem, error) {
	var q QueueItem
	err := s.pool.QueryRow(ctx, `UPDATE gate_queue SET lease_owner = $1, lease_until = now() + $2 * interval '1 millisecond'
		WHERE id = (SELECT id FROM gate_queue WHERE done_at IS NULL AND (lease_until IS NULL OR lease_until < now())
			ORDER BY queued_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
		RETURNING id, workflow, server, reason, queued_at, lease_owner, lease_until`, owner, lease.Milliseconds()).
		Scan(&q.ID, &q.Workflow, &q.Server, &q.Reason, &q.QueuedAt, &q.LeaseOwner, &q.LeaseUntil)
	if err != nil {
		return q, notFound("gate queue", err)
	}
	return q, nil
}

// Complete closes a claimed item with the run it produced. It returns ErrLeased when owner
// no longer holds the lease (it expired and another replica took the item).
func (s *Store) Complete(ctx context.Context, itemID int64, owner string, runID int64) error {
	var run *int64
	if runID != 0 {
		run = &runID
	}
	tag, err := s.pool.Exec(ctx, `UPDATE gate_queue SET done_at = now(), run_id = $3 WHERE id = $1 AND lease_owner = $2 AND done_at IS NULL`,
		itemID, owner, run)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("complete gate queue item %d: %w", itemID, ErrLeased)
	}
	return nil
}

// QueueConfig configures the repeat-run service. Zero values take the documented defaults.
type QueueConfig struct {
	// Store is the gate store (required).
	Store *Store
	// Runner runs the suites (required).
	Runner *Runner
	// Target resolves a queued (workflow, server) to its gate target from the policy (required).
	Target func(workflow, server string) (Target, error)
	// ReplicaID names this replica in leases (required).
	ReplicaID string
	// Lease is how long a claim is held (default 10 minutes; a run must end inside it).
	Lease time.Duration
	// Interval is the pause between passes that found nothing (default 5s).
	Interval time.Duration
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// AfterPass, when set, is called after each pass with the id of the run it stored (0 = none).
	AfterPass func(runID int64)
	// Bindings, when set, gives what each gated workflow must be bound to now (its gate
	// server's current manifest fingerprint, the build, the pins). Every RecheckEvery the
	// service compares them with the stored evidence: a change voids the verdicts and queues
	// a run (Store.Recheck).
	Bindings func(ctx context.Context) ([]Binding, error)
	// RecheckEvery is the interval of those comparisons (default 1 minute).
	RecheckEvery time.Duration
}

// Queue is the service that runs queued repeat runs, one at a time per replica.
type Queue struct {
	cfg  QueueConfig
	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// NewQueue validates cfg and returns a stopped service.
func NewQueue(cfg QueueConfig) (*Queue, error) {
	if cfg.Store == nil || cfg.Runner == nil || cfg.Target == nil || cfg.ReplicaID == "" {
		return nil, errors.New("gates: Store, Runner, Target and ReplicaID are required")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 10 * time.Minute
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.RecheckEvery <= 0 {
		cfg.RecheckEvery = time.Minute
	}
	return &Queue{cfg: cfg}, nil
}

// Start runs the service until Stop or ctx ends.
func (q *Queue) Start(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stop != nil {
		return errors.New("gates: queue already started")
	}
	ctx, q.stop = context.WithCancel(ctx)
	q.done = make(chan struct{})
	go func() {
		defer close(q.done)
		var rechecked time.Time
		for {
			if q.cfg.Bindings != nil && time.Since(rechecked) >= q.cfg.RecheckEvery {
				rechecked = time.Now()
				q.recheck(ctx)
			}
			id := q.runOnce(ctx)
			if q.cfg.AfterPass != nil {
				q.cfg.AfterPass(id)
			}
			if id != 0 {
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(q.cfg.Interval):
			}
		}
	}()
	return nil
}

// Stop ends the service and waits for the current run; it is idempotent.
func (q *Queue) Stop() {
	q.mu.Lock()
	stop, done := q.stop, q.done
	q.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// recheck compares every binding with the stored evidence and queues what changed.
func (q *Queue) recheck(ctx context.Context) {
	bs, err := q.cfg.Bindings(ctx)
	if err != nil {
		q.cfg.Logger.Error("gate bindings", "err", err)
		return
	}
	for _, b := range bs {
		if _, queued, err := q.cfg.Store.Recheck(ctx, b); err != nil {
			q.cfg.Logger.Error("recheck gate evidence", "workflow", b.Workflow, "err", err)
		} else if queued {
			q.cfg.Logger.Info("gate evidence stale: run queued", "workflow", b.Workflow)
		}
	}
}

// runOnce claims one item, runs it and stores the run; it returns the run's id (0 = none).
func (q *Queue) runOnce(ctx context.Context) int64 {
	item, err := q.cfg.Store.Claim(ctx, q.cfg.ReplicaID, q.cfg.Lease)
	if err != nil {
		if !errors.Is(err, ErrNotFound) && ctx.Err() == nil {
			q.cfg.Logger.Error("claim gate queue item", "err", err)
		}
		return 0
	}
	log := q.cfg.Logger.With("workflow", item.Workflow, "server", item.Server, "item", item.ID)
	t, err := q.cfg.Target(item.Workflow, item.Server)
	if err != nil {
		log.Error("gate target", "err", err)
		_ = q.cfg.Store.Complete(ctx, item.ID, q.cfg.ReplicaID, 0)
		return 0
	}
	rctx, cancel := context.WithTimeout(ctx, q.cfg.Lease)
	defer cancel()
	run := q.cfg.Runner.Run(rctx, t, nil)
	run.StartedBy = "queue: " + item.Reason
	id, _, err := q.cfg.Store.Save(ctx, run)
	if err != nil {
		log.Error("store gate run", "err", err)
		return 0
	}
	if err := q.cfg.Store.Complete(ctx, item.ID, q.cfg.ReplicaID, id); err != nil {
		log.Warn("gate queue lease lost during the run", "err", err)
	}
	log.Info("gate run stored", "run", id, "verdict", run.Verdict)
	return id
}

// InTx runs f in one transaction (an operator's start and its audit row commit together).
func (s *Store) InTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, f)
}

// EnqueueTx is Enqueue inside the caller's transaction.
func (s *Store) EnqueueTx(ctx context.Context, tx pgx.Tx, workflow, server, reason string) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO gate_queue (workflow, server, reason) VALUES ($1, $2, $3)
		ON CONFLICT (workflow, server) WHERE done_at IS NULL DO NOTHING`, workflow, server, inert(reason, 1000))
	if err != nil {
		return false, fmt.Errorf("queue gate run of %s: %w", workflow, err)
	}
	return tag.RowsAffected() == 1, nil
}
