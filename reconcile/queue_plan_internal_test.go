package reconcile

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/internal/pgtest"
)

// TestOpenStateFilterUsesTheQueueIndex checks that the queue filtered by an open state (needs a
// person, verifying) is planned on the open items' state index, in queue order, instead of
// walking every item ever opened.
func TestOpenStateFilterUsesTheQueueIndex(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	for _, state := range []State{StateNeedsPerson, StateVerifying} {
		var args []any
		w, err := where(Scope{All: true}, Filter{State: string(state)}, &args)
		if err != nil {
			t.Fatal(err)
		}
		var plan string
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
				return err
			}
			return tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT `+itemColumns+itemFrom+` WHERE `+w+
				` ORDER BY r.opened_at, r.id LIMIT 51`, args...).Scan(&plan)
		})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(plan, "reconciliation_items_state_queue_idx") {
			t.Errorf("state %s: the plan does not use the open items' state index:\n%s", state, plan)
		}
	}
}
