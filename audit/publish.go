package audit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PublishInterval is how often a change listener publishes the ledger's accumulated changes:
// the most a live update waits beyond its commit.
const PublishInterval = 100 * time.Millisecond

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

// publish calls PublishPending every PublishInterval until ctx ends.
func publish(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) {
	t := time.NewTicker(PublishInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := PublishPending(ctx, pool)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			logger.Warn("live changes not published", "err", err)
			failing = true
		case err == nil:
			failing = false
		}
	}
}
