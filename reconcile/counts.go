package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// The queue's open items are counted by tenant, workflow, reason and state in queue_counts,
// with the changes since the last compaction appended to queue_count_deltas by a trigger
// (migration 00025): counts plus deltas are what the items say, in any one snapshot.

// CompactQueueCounts folds the appended changes into the counts. Compactions may run at once
// (each change is taken once); a recount may not (the console runs both under the lock of its
// counts, operations.Store.CompactOverview).
func CompactQueueCounts(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, `WITH d AS (DELETE FROM queue_count_deltas RETURNING tenant, workflow, reason, state, items)
		INSERT INTO queue_counts AS c SELECT tenant, workflow, reason, state, sum(items) FROM d GROUP BY 1, 2, 3, 4
		ON CONFLICT (tenant, workflow, reason, state) DO UPDATE SET items = c.items + excluded.items`); err != nil {
		return fmt.Errorf("compact queue counts: %w", err)
	}
	return nil
}

// RecountQueueCounts counts the open items again, in one statement so the changes it drops
// are exactly those its count sees: the repair for items written with the triggers off.
func RecountQueueCounts(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, `WITH d AS (DELETE FROM queue_count_deltas),
		fresh AS (SELECT tenant, workflow, reason, state, count(*)::bigint AS items FROM reconciliation_items
			WHERE closed_at IS NULL GROUP BY 1, 2, 3, 4),
		gone AS (DELETE FROM queue_counts c WHERE NOT EXISTS (SELECT 1 FROM fresh f
			WHERE f.tenant = c.tenant AND f.workflow = c.workflow AND f.reason = c.reason AND f.state = c.state))
		INSERT INTO queue_counts AS c SELECT * FROM fresh
		ON CONFLICT (tenant, workflow, reason, state) DO UPDATE SET items = excluded.items`); err != nil {
		return fmt.Errorf("recount queue counts: %w", err)
	}
	return nil
}

// countOpen counts the open items f selects in scope from the counts, or reports false when f
// filters on what the counts do not hold (age, claims) or selects closed items.
func (s *Store) countOpen(ctx context.Context, scope Scope, f Filter) (int, bool, error) {
	if f.OlderThan > 0 || f.ClaimedBy != "" {
		return 0, false, nil
	}
	args := []any{scope.All, scope.Tenants}
	conds := []string{"($1::bool OR tenant = ANY($2::text[]))"}
	add := func(col, v string) {
		if v != "" {
			args = append(args, v)
			conds = append(conds, col+" = $"+strconv.Itoa(len(args)))
		}
	}
	switch f.State {
	case "":
	case string(StateVerifying), string(StateNeedsPerson):
		add("state", f.State)
	default:
		return 0, false, nil
	}
	add("tenant", f.Tenant)
	add("workflow", f.Workflow)
	add("reason", string(f.Reason))
	var n int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(items), 0) FROM (
		SELECT tenant, workflow, reason, state, items FROM queue_counts
		UNION ALL SELECT tenant, workflow, reason, state, items FROM queue_count_deltas) c
		WHERE `+strings.Join(conds, " AND "), args...).Scan(&n)
	if err != nil {
		return 0, false, fmt.Errorf("count open items: %w", err)
	}
	return n, true, nil
}
