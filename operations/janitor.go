package operations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/lifecycle"
)

// JanitorConfig configures a retention Janitor. Zero values take the documented defaults.
type JanitorConfig struct {
	// Store is the ledger (required).
	Store *Store
	// Policy gives each workflow's status_retention (required). Operations of workflows no
	// longer in the policy keep the default retention of 30 days.
	Policy *config.Config
	// Interval is the pause between passes (default 1h).
	Interval time.Duration
	// PassTimeout bounds one pass (default 1m).
	PassTimeout time.Duration
	// BatchSize is how many operations one delete statement covers (default 500); a pass
	// repeats statements until nothing is left.
	BatchSize int
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// AfterPass, when set, is called after every pass with what it removed.
	AfterPass func(Pruned)
}

// Pruned counts what one janitor pass removed.
type Pruned struct {
	// Envelopes is the number of task envelopes removed.
	Envelopes int64
	// TimelineEntries is the number of task timeline entries removed.
	TimelineEntries int64
	// PollHours is the number of poll-log hours (server_poll_hours rows) removed.
	PollHours int64
	// Err is the pass's error, if any.
	Err error
}

const defaultRetention = 30 * 24 * time.Hour

// PollLogRetention is how long the poll log keeps an hour's counts: a week, far more than the
// Servers page's charts show.
const PollLogRetention = 7 * 24 * time.Hour

func (c *JanitorConfig) validate() error {
	if c.Store == nil || c.Policy == nil {
		return errors.New("operations: janitor needs Store and Policy")
	}
	if c.Interval <= 0 {
		c.Interval = time.Hour
	}
	if c.PassTimeout <= 0 {
		c.PassTimeout = time.Minute
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 500
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Janitor removes task envelopes and task timelines older than their workflow's
// status_retention: an envelope once fetched longer ago than that, a timeline once its task
// has been final that long; and the poll log's hours older than PollLogRetention. Evidence is
// kept: the operation row with its domain outcome, the reconciliation items and their history,
// the input ledger, transition violations and the audit log are never removed, and nothing is
// removed while the operation has an open reconciliation item. A task's protocol TTL plays no
// part: it never permits forgetting.
type Janitor struct {
	cfg JanitorConfig

	life lifecycle.Loop
}

// NewJanitor validates cfg and returns a stopped Janitor.
func NewJanitor(cfg JanitorConfig) (*Janitor, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Logger = cfg.Logger.With("component", "retention")
	return &Janitor{cfg: cfg}, nil
}

// Start runs a pass at once and then every Interval until Stop. It returns an error if the
// janitor is running.
func (j *Janitor) Start(ctx context.Context) error {
	if err := j.life.Start(ctx, j.loop); err != nil {
		return fmt.Errorf("operations: janitor: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for a running pass. It is idempotent.
func (j *Janitor) Stop() {
	j.life.Stop()
}

func (j *Janitor) loop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p := j.runOnce(ctx)
		if p.Err != nil && ctx.Err() == nil {
			j.cfg.Logger.Error("retention pass", "err", p.Err)
		} else if p.Envelopes+p.TimelineEntries+p.PollHours > 0 {
			j.cfg.Logger.Info("retention pass", "envelopes", p.Envelopes, "timeline_entries", p.TimelineEntries, "poll_hours", p.PollHours)
		}
		if j.cfg.AfterPass != nil {
			j.cfg.AfterPass(p)
		}
		t.Reset(j.cfg.Interval)
	}
}

// retentionCTE selects up to $4 operations whose data of one kind is past retention: $1/$2
// are the workflows and their retention in ms, $3 the default retention in ms. %s is the
// condition on the kind's age (aliases o, t, e).
const retentionCTE = `
WITH ret(workflow, keep_ms) AS (SELECT * FROM unnest($1::text[], $2::bigint[])),
old AS (
	SELECT o.id FROM operations o
	LEFT JOIN ret ON ret.workflow = o.workflow
	%s
	AND NOT EXISTS (SELECT 1 FROM reconciliation_items r WHERE r.operation_id = o.id AND r.closed_at IS NULL)
	LIMIT $4)`

const pruneEnvelopes = `
	JOIN task_envelopes e ON e.operation_id = o.id
	WHERE e.fetched_at < now() - coalesce(ret.keep_ms, $3) * interval '1 millisecond'`

const pruneTimelines = `
	JOIN tasks t ON t.operation_id = o.id
	WHERE t.terminal_at < now() - coalesce(ret.keep_ms, $3) * interval '1 millisecond'
	  AND t.state NOT IN ('creating', 'working', 'input_required') AND t.result_state <> 'pending'
	  AND EXISTS (SELECT 1 FROM task_timeline tl WHERE tl.operation_id = o.id)`

// runOnce removes what is past retention, in batches, under the pass timeout.
func (j *Janitor) runOnce(ctx context.Context) Pruned {
	ctx, cancel := context.WithTimeout(ctx, j.cfg.PassTimeout)
	defer cancel()
	var names []string
	var keep []int64
	for _, wf := range j.cfg.Policy.Workflows {
		names = append(names, wf.Name)
		keep = append(keep, wf.StatusRetention.Milliseconds())
	}
	var p Pruned
	pool := j.cfg.Store.pool
	for _, step := range []struct {
		sql string
		n   *int64
	}{
		{fmt.Sprintf(retentionCTE, pruneEnvelopes) + ` DELETE FROM task_envelopes e USING old WHERE e.operation_id = old.id`, &p.Envelopes},
		{fmt.Sprintf(retentionCTE, pruneTimelines) + ` DELETE FROM task_timeline tl USING old WHERE tl.operation_id = old.id`, &p.TimelineEntries},
	} {
		for {
			tag, err := pool.Exec(ctx, step.sql, names, keep, defaultRetention.Milliseconds(), j.cfg.BatchSize)
			if err != nil {
				p.Err = fmt.Errorf("prune past retention: %w", err)
				return p
			}
			*step.n += tag.RowsAffected()
			if tag.RowsAffected() == 0 {
				break
			}
		}
	}
	tag, err := pool.Exec(ctx, `DELETE FROM server_poll_hours WHERE hour < now() - $1 * interval '1 millisecond'`, PollLogRetention.Milliseconds())
	if err != nil {
		p.Err = fmt.Errorf("prune poll log: %w", err)
		return p
	}
	p.PollHours = tag.RowsAffected()
	return p
}
