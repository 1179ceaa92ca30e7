package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A change listener publishes the ledger's accumulated changes every PublishInterval while
// changes keep coming. A drain that found none doubles the wait, up to IdlePublishInterval, and
// the first that finds some brings it back: a live update waits at most PublishInterval beyond
// its commit under load and IdlePublishInterval after a quiet spell, and an idle console asks
// PostgreSQL 2.5 times a second rather than 10 (each ask a round trip and a statement on both
// sides, on every console, all day).
const (
	PublishInterval     = 100 * time.Millisecond
	IdlePublishInterval = 400 * time.Millisecond
)

// nextPublishWait is the wait before the next drain after one that published n notifications
// following a wait of prev.
func nextPublishWait(prev time.Duration, n int) time.Duration {
	if n > 0 {
		return PublishInterval
	}
	return max(PublishInterval, min(2*prev, IdlePublishInterval))
}

// publishSQL takes every change the ledger's triggers appended to live_changes and sends one
// notification on ChangeChannel per area and tenant, in this statement's own transaction, so
// the start path's commits never queue on the notification lock. Concurrent publishers (one
// per console) each take a row at most once. A change that names only its operation gets the
// tenant from the operation's primary key, one lookup per distinct operation: as a join, the
// planner, taking live_changes for thousands of rows from statistics gathered in a burst,
// hashed the whole operations table every 100 ms (49 ms at 48,000 operations, 11 ms a call on
// average in a start run).
const publishSQL = `WITH d AS (DELETE FROM live_changes RETURNING area, tenant, operation_id),
	u AS (SELECT DISTINCT area, tenant, operation_id FROM d),
	c AS (SELECT DISTINCT u.area, coalesce(u.tenant, (SELECT o.tenant FROM operations o WHERE o.id = u.operation_id), '') AS tenant FROM u)
	SELECT count(pg_notify('` + ChangeChannel + `', json_build_object('area', c.area, 'tenant', c.tenant)::text)) FROM c`

// PublishPending sends the notifications for the ledger changes committed since the last
// publication and returns how many it sent.
func PublishPending(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, publishSQL).Scan(&n); err != nil {
		return 0, fmt.Errorf("publish live changes: %w", err)
	}
	return n, nil
}

// publish calls PublishPending until ctx ends, every PublishInterval while changes come and
// less often, down to every IdlePublishInterval, while none do (nextPublishWait).
func publish(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	wait := PublishInterval
	t := time.NewTimer(wait)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := PublishPending(ctx, pool)
		wait = nextPublishWait(wait, n)
		t.Reset(wait)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			logger.Warn("live changes not published", "err", err)
			failing = true
		case err == nil:
			failing = false
		}
	}
}
