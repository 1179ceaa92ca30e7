package operations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/reconcile"
)

// The console's counts (the overview's matrix, chart and per-workflow load, the list totals, the
// servers page) are read from counter tables that the start path never writes (migration 00024).
// A change to anything counted appends the operation's id to overview_dirty from a trigger;
// CompactOverview recomputes the facts of the dirty operations from the ledger, keeps them in
// overview_ops and adds the difference to the counters. A reader adds the difference for the
// ids still dirty in its own snapshot, so it reads what the direct aggregation over the ledger
// would, compacted or not.

// openStatesSQL are the task states of an operation still open (with "attention" set).
const openStatesSQL = `('creating', 'working', 'input_required')`

// factCols are overview_ops' columns, in its order.
const factCols = `operation_id, tenant, workflow, route, created_at, task_state, tool_error, outcome, attention, needs_person,
	ended_hour, ri_open, ri_hours, server, polls, to_terminal`

// factsSQL computes what overview_ops keeps of each operation o it selects (add the WHERE):
// static attributes, task state and tool error, domain outcome, attention set, needs a person
// (NeedsPersonSQL), the UTC hour its work ended (its task's final state, or without a task its
// envelope's finish), whether a reconciliation item is open, the hours its items were opened
// (NULL for none: most operations have none, and an empty array takes room),
// and its task's server, and its status reads and seconds from start once final (a poll of a
// task still running changes nothing counted, and runs no trigger).
const factsSQL = `SELECT o.id AS operation_id, o.tenant AS tenant, o.workflow AS workflow, o.route AS route,
	o.created_at AS created_at, coalesce(t.state, '') AS task_state, coalesce(t.tool_error, false) AS tool_error,
	o.domain_outcome AS outcome, o.attention IS NOT NULL AS attention, ` + NeedsPersonSQL + ` AS needs_person,
	CASE WHEN t.operation_id IS NOT NULL THEN date_trunc('hour', t.terminal_at, 'UTC') ELSE date_trunc('hour', e.finished_at, 'UTC') END AS ended_hour,
	EXISTS (SELECT 1 FROM reconciliation_items r1 WHERE r1.operation_id = o.id AND r1.closed_at IS NULL) AS ri_open,
	nullif(ARRAY(SELECT date_trunc('hour', r2.opened_at, 'UTC') FROM reconciliation_items r2 WHERE r2.operation_id = o.id ORDER BY 1), '{}') AS ri_hours,
	coalesce(t.server, '') AS server, CASE WHEN t.terminal_at IS NOT NULL THEN t.polls ELSE 0 END AS polls, extract(epoch FROM t.terminal_at - o.created_at) AS to_terminal
	FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id LEFT JOIN task_envelopes e ON e.operation_id = o.id`

// searchSQL is what overview_search keeps of each operation o it selects (add the WHERE).
const searchSQL = `SELECT o.id, o.tenant, o.created_at, o.object_ref, o.idempotency_key, t.task_id
	FROM operations o LEFT JOIN tasks t ON t.operation_id = o.id`

// The counter tables' rows from a relation of facts with a sign (+1 counted, -1 taken out). Each
// groups as its table's primary key.

func totalsOf(rel string) string {
	return `SELECT tenant, workflow, route, task_state, tool_error, outcome, attention, needs_person,
		sum(sign)::bigint AS ops, coalesce(sum(sign) FILTER (WHERE ri_open), 0)::bigint AS ri_open
		FROM ` + rel + ` GROUP BY 1, 2, 3, 4, 5, 6, 7, 8`
}

func createdOf(rel string) string {
	return `SELECT tenant, date_trunc('hour', created_at, 'UTC') AS hour, workflow, route, task_state, tool_error, outcome,
		sum(sign)::bigint AS ops FROM ` + rel + ` WHERE NOT (task_state IN ` + openStatesSQL + ` OR attention) GROUP BY 1, 2, 3, 4, 5, 6, 7`
}

func hourlyOf(rel string) string {
	return `SELECT tenant, hour, sum(starts)::bigint AS starts, sum(ended)::bigint AS ended, sum(unknown)::bigint AS unknown FROM (
		SELECT tenant, date_trunc('hour', created_at, 'UTC') AS hour, sign AS starts, 0 AS ended, 0 AS unknown FROM ` + rel + `
		UNION ALL SELECT tenant, ended_hour, 0, sign, 0 FROM ` + rel + ` WHERE ended_hour IS NOT NULL
		UNION ALL SELECT tenant, h, 0, 0, sign FROM ` + rel + `, unnest(ri_hours) AS h) x GROUP BY 1, 2`
}

func serverHoursOf(rel string) string {
	return `SELECT tenant, server, ended_hour AS hour, sum(sign)::bigint AS ended, sum(sign * polls)::bigint AS polls,
		coalesce(sum(sign) FILTER (WHERE task_state IN ('failed', 'unobservable', 'expired') OR tool_error), 0)::bigint AS errors,
		sum(sign * to_terminal) AS to_terminal
		FROM ` + rel + ` WHERE task_state <> '' AND ended_hour IS NOT NULL GROUP BY 1, 2, 3`
}

// addCounters adds the counter rows of the facts relation chg (a CTE with a sign) to the
// counter tables: one CTE per table, to append to a WITH.
func addCounters(chg string) string {
	return `ct AS (INSERT INTO overview_totals AS c SELECT * FROM (` + totalsOf(chg) + `) x WHERE ops <> 0 OR ri_open <> 0
		ON CONFLICT (tenant, workflow, route, task_state, tool_error, outcome, attention, needs_person)
		DO UPDATE SET ops = c.ops + excluded.ops, ri_open = c.ri_open + excluded.ri_open),
	cc AS (INSERT INTO overview_created AS c SELECT * FROM (` + createdOf(chg) + `) x WHERE ops <> 0
		ON CONFLICT (tenant, hour, workflow, route, task_state, tool_error, outcome) DO UPDATE SET ops = c.ops + excluded.ops),
	ch AS (INSERT INTO overview_hourly AS c SELECT * FROM (` + hourlyOf(chg) + `) x WHERE starts <> 0 OR ended <> 0 OR unknown <> 0
		ON CONFLICT (tenant, hour) DO UPDATE SET starts = c.starts + excluded.starts, ended = c.ended + excluded.ended,
		unknown = c.unknown + excluded.unknown),
	cs AS (INSERT INTO overview_server_hours AS c SELECT * FROM (` + serverHoursOf(chg) + `) x
		WHERE ended <> 0 OR polls <> 0 OR errors <> 0 OR to_terminal <> 0
		ON CONFLICT (tenant, server, hour) DO UPDATE SET ended = c.ended + excluded.ended, polls = c.polls + excluded.polls,
		errors = c.errors + excluded.errors, to_terminal = c.to_terminal + excluded.to_terminal)`
}

// overviewLock is the advisory lock under which one compactor (or recount) at a time, on any
// replica, moves dirty operations into the counts.
const overviewLock = `hashtextextended('taskgate:overview', 0)`

// compactSQL takes up to $1 dirty marks, recomputes their operations' facts, keeps them and
// adds the difference to the counters; it returns the marks taken. One statement: the facts it
// kept before, the facts now and the marks it takes are all of one snapshot.
//
// The marks taken are those up to the $1-th in the table's physical order (a TID range): the
// work is linear in the marks read whatever plan the table's statistics give. Taking them as
// "ctid = ANY (the first $1 ctids)" made a plan cached while the table was empty (a sequential
// scan, the array searched for every row) compare every mark with every one taken: under a
// burst of 75,000 marks a statement took 2-5 s of one core.
var compactSQL = `WITH d AS (DELETE FROM overview_dirty WHERE ctid <= coalesce((SELECT ctid FROM overview_dirty LIMIT 1 OFFSET $1 - 1), '(4294967295,65535)'::tid) RETURNING operation_id),
	ids AS (SELECT coalesce(array_agg(DISTINCT operation_id), '{}') AS ids FROM d),
	cur AS (` + factsSQL + ` WHERE o.id = ANY ((SELECT ids FROM ids)::uuid[])),
	old AS (SELECT ` + factCols + ` FROM overview_ops WHERE operation_id = ANY ((SELECT ids FROM ids)::uuid[])),
	kept AS (INSERT INTO overview_ops AS k (` + factCols + `) SELECT ` + factCols + ` FROM cur
		ON CONFLICT (operation_id) DO UPDATE SET tenant = excluded.tenant, workflow = excluded.workflow, route = excluded.route,
		created_at = excluded.created_at, task_state = excluded.task_state, tool_error = excluded.tool_error, outcome = excluded.outcome,
		attention = excluded.attention, needs_person = excluded.needs_person, ended_hour = excluded.ended_hour, ri_open = excluded.ri_open,
		ri_hours = excluded.ri_hours, server = excluded.server, polls = excluded.polls, to_terminal = excluded.to_terminal
		WHERE ROW(k.*) IS DISTINCT FROM ROW(excluded.*)),
	gone AS (DELETE FROM overview_ops WHERE operation_id = ANY ((SELECT ids FROM ids)::uuid[]) AND operation_id NOT IN (SELECT operation_id FROM cur)),
	sk AS (INSERT INTO overview_search AS k ` + searchSQL + ` WHERE o.id = ANY ((SELECT ids FROM ids)::uuid[])
		ON CONFLICT (operation_id) DO UPDATE SET tenant = excluded.tenant, created_at = excluded.created_at, object_ref = excluded.object_ref,
		idempotency_key = excluded.idempotency_key, task_id = excluded.task_id WHERE ROW(k.*) IS DISTINCT FROM ROW(excluded.*)),
	sg AS (DELETE FROM overview_search WHERE operation_id = ANY ((SELECT ids FROM ids)::uuid[]) AND operation_id NOT IN (SELECT operation_id FROM cur)),
	chg AS (SELECT ` + factCols + `, 1 AS sign FROM cur UNION ALL SELECT ` + factCols + `, -1 FROM old),
	` + addCounters("chg") + `
	SELECT count(*) FROM d`

// compactBatch is how many dirty marks one compaction statement takes.
const compactBatch = 5000

// CompactOverview moves the operations marked dirty into the console's counts and returns how
// many marks it took. When another replica is compacting it returns 0 at once. Readers are exact
// whether or not it runs; it keeps what they recompute small.
func (s *Store) CompactOverview(ctx context.Context) (int, error) {
	// An idle pass is one round trip: every console replica compacts every second, all day,
	// and a pass with nothing to take would otherwise cost a transaction of five. A mark
	// committed after this look waits for the next pass; readers are exact meanwhile.
	var pending bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM overview_dirty) OR EXISTS (SELECT 1 FROM queue_count_deltas)`).Scan(&pending); err != nil {
		return 0, fmt.Errorf("compact overview counts: %w", err)
	}
	if !pending {
		return 0, nil
	}
	total := 0
	for {
		n := 0
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var mine bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(`+overviewLock+`)`).Scan(&mine); err != nil || !mine {
				return err
			}
			// This statement's snapshot is taken after the lock: it sees every compaction before.
			if err := tx.QueryRow(ctx, compactSQL, compactBatch).Scan(&n); err != nil {
				return err
			}
			// The reconciliation queue's counts, folded under the same lock as their recount.
			return reconcile.CompactQueueCounts(ctx, tx)
		})
		if err != nil {
			return total, fmt.Errorf("compact overview counts: %w", err)
		}
		total += n
		if n < compactBatch {
			return total, nil
		}
	}
}

// RecountOverview counts the whole ledger again, and the reconciliation queue's open items
// (reconcile.RecountQueueCounts): the repair for counts written with the
// triggers off (session_replication_role = replica, as the benchmark seeds), and the first
// count of a ledger that existed before the counters (the compactor's service runs it then).
// Readers keep the previous counts until it commits.
func (s *Store) RecountOverview(ctx context.Context) error { return s.recount(ctx, false) }

// RecountOverviewIfNeeded counts the ledger unless the counts hold it, seen under the lock:
// replicas (or a replica and a tool) starting together count it once.
func (s *Store) RecountOverviewIfNeeded(ctx context.Context) error { return s.recount(ctx, true) }

func (s *Store) recount(ctx context.Context, ifNeeded bool) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+overviewLock+`)`); err != nil {
			return err
		}
		if ifNeeded {
			var counted bool
			if err := tx.QueryRow(ctx, `SELECT counted_at IS NOT NULL FROM overview_state`).Scan(&counted); err != nil || counted {
				return err
			}
		}
		for _, q := range []string{
			// Marks taken here are of changes the count below sees; later ones stay.
			`DELETE FROM overview_dirty`,
			`DELETE FROM overview_ops`, `DELETE FROM overview_totals`, `DELETE FROM overview_created`,
			`DELETE FROM overview_hourly`, `DELETE FROM overview_server_hours`, `DELETE FROM overview_search`,
			`INSERT INTO overview_ops (` + factCols + `) ` + factsSQL,
			`INSERT INTO overview_search ` + searchSQL,
			`WITH chg AS (SELECT ` + factCols + `, 1 AS sign FROM overview_ops), ` + addCounters("chg") + ` SELECT 1`,
			`UPDATE overview_state SET counted_at = now()`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return reconcile.RecountQueueCounts(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("recount overview: %w", err)
	}
	s.countedSeen.Store(true)
	return nil
}

// overviewCounted reports whether the counters hold the whole ledger (RecountOverview ran, or the
// ledger was empty when they were made). It never goes back to false, so a true is remembered.
func (s *Store) overviewCounted(ctx context.Context) (bool, error) {
	if s.countedSeen.Load() {
		return true, nil
	}
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT counted_at IS NOT NULL FROM overview_state`).Scan(&ok); err != nil {
		return false, fmt.Errorf("overview counted: %w", err)
	}
	if ok {
		s.countedSeen.Store(true)
	}
	return ok, nil
}

// pendCTE computes, as two CTEs dirty and pend, the facts of the operations still dirty in scope
// ($1 all, $2 tenants): their facts now with sign +1 and the facts counted before with -1. A
// reader adds pend's counter rows to the tables' to read what the ledger holds now.
const pendCTE = dirtyCTE + `,
	pend AS (SELECT ` + factCols + `, 1 AS sign FROM (` + factsSQL + ` WHERE o.id = ANY ((SELECT ids FROM dirty)::uuid[]) AND ($1 OR o.tenant = ANY($2))) f
		UNION ALL SELECT ` + factCols + `, -1 FROM overview_ops WHERE operation_id = ANY ((SELECT ids FROM dirty)::uuid[]) AND ($1 OR tenant = ANY($2)))`

// dirtyCTE is the CTE dirty: the ids marked dirty, as one array. Readers match ids against it
// (= ANY) rather than join the table: the plan stays index probes of the dirty ids whatever the
// table's statistics say (a join planned for many marks would read the whole ledger).
const dirtyCTE = `dirty AS (SELECT coalesce(array_agg(DISTINCT operation_id), '{}') AS ids FROM overview_dirty)`
