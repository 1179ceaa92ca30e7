package operations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/internal/lifecycle"
)

// MarkSending writes, before a call is sent, that the operation's call is being sent and by
// when its answer is due (now + budget). A call is sent only once this is written: when the
// ledger cannot say so, nothing is sent.
func (s *Store) MarkSending(ctx context.Context, opID string, budget time.Duration) error {
	tag, err := s.pool.Exec(ctx, `UPDATE operation_calls SET sent_at = now(), due_at = now() + $2 * interval '1 millisecond'
		WHERE operation_id = $1 AND sent_at IS NULL`, opID, max(budget, 0).Milliseconds())
	if err != nil {
		return fmt.Errorf("mark the call of %s sending: %w", opID, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("mark the call of %s sending: already sent or recorded", opID)
	}
	return nil
}

// Recovered counts what one recovery sweep settled.
type Recovered struct {
	// Unrecorded is the number of calls sent whose answer was never recorded: now outcome
	// unknown with a reconciliation item.
	Unrecorded int
	// NeverSent is the number of operations whose call was never sent: now outcome not_run.
	NeverSent int
	// ItemsOpened is the number of reconciliation items the sweep opened.
	ItemsOpened int
}

// SweepUnrecorded settles up to n operations whose call is overdue by more than grace:
//
//   - a call sent (the ledger said so before sending) whose answer was never recorded, past
//     its budget plus grace, gets the domain outcome unknown and a reconciliation item saying
//     what is known (when it was sent, on which route; a creating task becomes
//     create_unacknowledged). It is never sent again.
//   - a call never sent (the start stopped between the ledger row and the call), older than
//     grace, gets the domain outcome not_run; a creating task becomes failed. Its concurrency
//     slot is freed.
//
// Rows are locked with SKIP LOCKED, so replicas sweeping together settle each row once.
func (s *Store) SweepUnrecorded(ctx context.Context, grace time.Duration, n int) (Recovered, error) {
	var rec Recovered
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT o.id, o.route, c.sent_at, coalesce(t.state, '') FROM operation_calls c
			JOIN operations o ON o.id = c.operation_id LEFT JOIN tasks t ON t.operation_id = o.id
			WHERE (c.sent_at IS NOT NULL AND c.due_at < now() - $1 * interval '1 millisecond')
			   OR (c.sent_at IS NULL AND c.created_at < now() - $1 * interval '1 millisecond')
			ORDER BY c.created_at LIMIT $2 FOR UPDATE OF c, o SKIP LOCKED`, grace.Milliseconds(), n)
		if err != nil {
			return fmt.Errorf("find unrecorded calls: %w", err)
		}
		type stuck struct {
			id, route, state string
			sent             *time.Time
		}
		list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stuck, error) {
			var s stuck
			return s, r.Scan(&s.id, &s.route, &s.sent, &s.state)
		})
		if err != nil {
			return fmt.Errorf("find unrecorded calls: %w", err)
		}
		for _, c := range list {
			if c.sent == nil {
				if err := neverSent(ctx, tx, c.id, c.state); err != nil {
					return err
				}
				rec.NeverSent++
				continue
			}
			what := map[string]string{"task": "task creation (tools/call)", "sync": "synchronous tools/call", "job_api": "job submission"}[c.route]
			msg := fmt.Sprintf("the %s was sent at %s and its answer was never recorded (the ledger could not write it); the effect may have happened and the call is not resent",
				what, c.sent.UTC().Format(time.RFC3339))
			var state TaskState
			if c.state == string(StateCreating) {
				state = StateCreateUnacknowledged
			} else if err := addTimeline(ctx, tx, c.id, SourceWatcher, "call_unrecorded", msg); err != nil {
				return err
			}
			if c.route == string(RouteJobAPI) {
				if _, err := tx.Exec(ctx, `UPDATE job_runs SET status = 'unacknowledged', error = 'answer never recorded', updated_at = now()
					WHERE operation_id = $1 AND status = 'submitting'`, c.id); err != nil {
					return fmt.Errorf("job of %s: %w", c.id, err)
				}
			}
			opened, err := markUnknownOpened(ctx, tx, c.id, state, ReasonCallUnrecorded, msg)
			if err != nil {
				return err
			}
			rec.Unrecorded++
			if opened {
				rec.ItemsOpened++
			}
		}
		return nil
	})
	return rec, err
}

// neverSent settles an operation whose call was never sent: outcome not_run, a creating task
// failed.
func neverSent(ctx context.Context, tx pgx.Tx, opID, taskState string) error {
	const msg = "the call was never sent: the start stopped before it; nothing ran"
	if taskState == string(StateCreating) {
		if _, err := tx.Exec(ctx, `UPDATE tasks SET state = 'failed', status_message = $2, terminal_at = now(), next_poll_at = NULL,
			updated_at = now() WHERE operation_id = $1 AND state = 'creating'`, opID, msg); err != nil {
			return fmt.Errorf("fail the never-sent task of %s: %w", opID, err)
		}
	}
	if _, err := tx.Exec(ctx, `UPDATE job_runs SET status = 'not_sent', updated_at = now() WHERE operation_id = $1 AND status = 'submitting'`, opID); err != nil {
		return fmt.Errorf("job of %s: %w", opID, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE operations SET domain_outcome = 'not_run', updated_at = now()
		WHERE id = $1 AND domain_outcome = 'pending'`, opID); err != nil {
		return fmt.Errorf("mark %s not run: %w", opID, err)
	}
	if err := callRecorded(ctx, tx, opID); err != nil {
		return err
	}
	return addTimeline(ctx, tx, opID, SourceWatcher, "not_run", msg)
}

// RecoveryConfig configures a Recovery sweep. Zero values take the documented defaults.
type RecoveryConfig struct {
	// Store is the ledger (required).
	Store *Store
	// Grace is how long past its budget a call's answer may stay unrecorded before the sweep
	// settles it (default 1m).
	Grace time.Duration
	// Interval is the pause between sweeps (default 15s).
	Interval time.Duration
	// BatchSize is how many operations one sweep settles at most (default 200).
	BatchSize int
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// AfterSweep, when set, is called after every sweep.
	AfterSweep func(Recovered, error)
	// Registerer, when set, receives the sweep metrics (sweeps by result, operations settled by
	// kind, items opened, the last sweep's time).
	Registerer prometheus.Registerer
}

type recoveryMetrics struct {
	sweeps  *prometheus.CounterVec
	settled *prometheus.CounterVec
	items   prometheus.Counter
	last    prometheus.Gauge
}

func newRecoveryMetrics(reg prometheus.Registerer) (*recoveryMetrics, error) {
	m := &recoveryMetrics{
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_recovery_sweeps_total",
			Help: "Recovery sweeps run by this replica, by result (ok, error)."}, []string{"result"}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_recovery_settled_total",
			Help: "Operations the recovery sweep settled, by kind (unrecorded: sent, answer never recorded, now unknown; never_sent: now not_run)."}, []string{"kind"}),
		items: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskgate_recovery_items_opened_total",
			Help: "Reconciliation items the recovery sweep opened."}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskgate_recovery_last_sweep_timestamp_seconds",
			Help: "When this replica's last recovery sweep ended (Unix seconds)."}),
	}
	for _, l := range []string{"ok", "error"} {
		m.sweeps.WithLabelValues(l)
	}
	for _, l := range []string{"unrecorded", "never_sent"} {
		m.settled.WithLabelValues(l)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.sweeps, m.settled, m.items, m.last} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// Recovery runs SweepUnrecorded on every replica, so a call whose answer was lost (the ledger
// could not write it, or the console stopped) is settled within Grace plus Interval.
type Recovery struct {
	cfg     RecoveryConfig
	life    lifecycle.Loop
	metrics *recoveryMetrics
}

// NewRecovery validates cfg and returns a stopped Recovery.
func NewRecovery(cfg RecoveryConfig) (*Recovery, error) {
	if cfg.Store == nil {
		return nil, errors.New("operations: recovery needs a Store")
	}
	if cfg.Grace <= 0 {
		cfg.Grace = time.Minute
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 15 * time.Second
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 200
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newRecoveryMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("operations: recovery metrics: %w", err)
	}
	return &Recovery{cfg: cfg, metrics: m}, nil
}

// Start runs sweeps until Stop; a second Start is refused.
func (r *Recovery) Start(ctx context.Context) error {
	return r.life.Start(ctx, func(ctx context.Context) {
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			r.Sweep(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// Stop ends the sweeps and waits for the one in progress.
func (r *Recovery) Stop() { r.life.Stop() }

// Sweep runs one sweep until nothing overdue is left (or a batch fails).
func (r *Recovery) Sweep(ctx context.Context) Recovered {
	var total Recovered
	for {
		rec, err := r.cfg.Store.SweepUnrecorded(ctx, r.cfg.Grace, r.cfg.BatchSize)
		total.Unrecorded += rec.Unrecorded
		total.NeverSent += rec.NeverSent
		total.ItemsOpened += rec.ItemsOpened
		r.metrics.settled.WithLabelValues("unrecorded").Add(float64(rec.Unrecorded))
		r.metrics.settled.WithLabelValues("never_sent").Add(float64(rec.NeverSent))
		r.metrics.items.Add(float64(rec.ItemsOpened))
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("recovery sweep", "err", err)
		}
		if err != nil || rec.Unrecorded+rec.NeverSent < r.cfg.BatchSize {
			result := "ok"
			if err != nil {
				result = "error"
			}
			r.metrics.sweeps.WithLabelValues(result).Inc()
			r.metrics.last.SetToCurrentTime()
			if total.Unrecorded+total.NeverSent > 0 {
				r.cfg.Logger.Warn("recovery sweep settled calls", "unrecorded", total.Unrecorded, "never_sent", total.NeverSent)
			}
			if r.cfg.AfterSweep != nil {
				r.cfg.AfterSweep(total, err)
			}
			return total
		}
	}
}
