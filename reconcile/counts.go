package reconcile

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// The queue's open items are counted by tenant, workflow, reason, state and opening hour (UTC)
// in queue_counts,
// with the changes since the last compaction appended to queue_count_deltas by a trigger
// (migration 00025): counts plus deltas are what the items say, in any one snapshot.

// CompactQueueCounts folds the appended changes into the counts. Compactions may run at once
// (each change is taken once); a recount may not (the console runs both under the lock of its
// counts, operations.Store.CompactOverview).
func CompactQueueCounts(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, `WITH d AS (DELETE FROM queue_count_deltas RETURNING tenant, workflow, reason, state, hour, items)
		INSERT INTO queue_counts AS c SELECT tenant, workflow, reason, state, hour, sum(items) FROM d GROUP BY 1, 2, 3, 4, 5
		ON CONFLICT (tenant, workflow, reason, state, hour) DO UPDATE SET items = c.items + excluded.items`); err != nil {
		return fmt.Errorf("compact queue counts: %w", err)
	}
	// Hours whose items all closed count nothing.
	if _, err := q.Exec(ctx, `DELETE FROM queue_counts WHERE items = 0`); err != nil {
		return fmt.Errorf("compact queue counts: %w", err)
	}
	return nil
}

// RecountQueueCounts counts the open items again, in one statement so the changes it drops
// are exactly those its count sees: the repair for items written with the triggers off.
func RecountQueueCounts(ctx context.Context, q Querier) error {
	if _, err := q.Exec(ctx, `WITH d AS (DELETE FROM queue_count_deltas),
		fresh AS (SELECT tenant, workflow, reason, state, date_trunc('hour', opened_at, 'UTC') AS hour, count(*)::bigint AS items
			FROM reconciliation_items WHERE closed_at IS NULL GROUP BY 1, 2, 3, 4, 5),
		gone AS (DELETE FROM queue_counts c WHERE NOT EXISTS (SELECT 1 FROM fresh f
			WHERE (f.tenant, f.workflow, f.reason, f.state, f.hour) = (c.tenant, c.workflow, c.reason, c.state, c.hour)))
		INSERT INTO queue_counts AS c SELECT * FROM fresh
		ON CONFLICT (tenant, workflow, reason, state, hour) DO UPDATE SET items = excluded.items`); err != nil {
		return fmt.Errorf("recount queue counts: %w", err)
	}
	return nil
}

// countOpen counts the open items f selects in scope from the counts, or reports false when f
// filters on what the counts do not hold (a person's claims) or selects closed items. An age
// filter takes the hours wholly before its cutoff from the counts and counts the items of the
// cutoff's hour; the items claimed by nobody are the counted ones less those with a claim (few,
// read by index).
func (s *Store) countOpen(ctx context.Context, scope Scope, f Filter) (int, bool, error) {
	if f.ClaimedBy != "" && f.ClaimedBy != "nobody" {
		return 0, false, nil
	}
	args := []any{scope.All, scope.Tenants}
	conds := []string{"($1::bool OR tenant = ANY($2::text[]))"}
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "$", "$"+strconv.Itoa(len(args))))
	}
	switch f.State {
	case "":
	case string(StateVerifying), string(StateNeedsPerson):
		add("state = $", f.State)
	default:
		return 0, false, nil
	}
	for _, c := range []struct{ col, v string }{{"tenant", f.Tenant}, {"workflow", f.Workflow}, {"reason", string(f.Reason)}} {
		if c.v != "" {
			add(c.col+" = $", c.v)
		}
	}
	// Items: the counted hours (before the cutoff's hour under an age filter); with an age
	// filter, the open items of the cutoff's hour opened by the cutoff; less, claimed by
	// nobody, the open items with a claim that holds or has no expiry.
	counted, edge, claimed := strings.Join(conds, " AND "), "0", "0"
	var age []string
	if f.OlderThan > 0 {
		args = append(args, f.OlderThan.Milliseconds())
		cutoff := fmt.Sprintf("(now() - $%d * interval '1 millisecond')", len(args))
		counted += " AND hour < date_trunc('hour', " + cutoff + ", 'UTC')"
		age = []string{"opened_at >= date_trunc('hour', " + cutoff + ", 'UTC')", "opened_at <= " + cutoff}
		edge = `(SELECT count(*) FROM reconciliation_items WHERE closed_at IS NULL AND ` + strings.Join(append(age, conds...), " AND ") + `)`
	}
	if f.ClaimedBy == "nobody" {
		claimed = `(SELECT count(*) FROM reconciliation_items WHERE closed_at IS NULL AND claimed_by IS NOT NULL
			AND (claim_expires_at > now() OR claim_expires_at IS NULL) AND ` + strings.Join(conds, " AND ")
		if f.OlderThan > 0 {
			claimed += " AND opened_at <= " + strings.TrimPrefix(age[1], "opened_at <= ")
		}
		claimed += `)`
	}
	var n int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(sum(items), 0) + `+edge+` - `+claimed+` FROM (
		SELECT tenant, workflow, reason, state, hour, items FROM queue_counts
		UNION ALL SELECT tenant, workflow, reason, state, hour, items FROM queue_count_deltas) c
		WHERE `+counted, args...).Scan(&n)
	if err != nil {
		return 0, false, fmt.Errorf("count open items: %w", err)
	}
	return n, true, nil
}
