package operations

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerHour is what one server's tasks did in one hour, counted by the hour each task reached
// its final state.
type ServerHour struct {
	// Server is the MCP server's name in the policy.
	Server string `json:"server"`
	// Start is the start of the hour (UTC).
	Start time.Time `json:"start"`
	// Ended counts the tasks that reached a final state in the hour.
	Ended int `json:"ended"`
	// Polls counts the status reads those tasks took, from creation to their final state.
	Polls int `json:"polls"`
	// Errors counts those that ended failed, with a tool error, unobservable or expired.
	Errors int `json:"errors"`
	// MeanToTerminal is the mean time from the start of the operation to its task's final
	// state, over the tasks that ended in the hour (0 when none did).
	MeanToTerminal time.Duration `json:"mean_to_terminal"`
}

// ServerHours returns, per server and hour over the last window (at least an hour), the tasks
// in scope that ended in that hour: hours without any are left out.
func (s *Service) ServerHours(ctx context.Context, scope Scope, window time.Duration) ([]ServerHour, error) {
	return s.cfg.Store.ServerHours(ctx, scope, window)
}

// ServerHours reads ServerHours for scope: from the counters once they hold the whole ledger
// (counters.go), otherwise from the ledger.
func (s *Store) ServerHours(ctx context.Context, scope Scope, window time.Duration) ([]ServerHour, error) {
	hours := max(1, int(window/time.Hour))
	counted, err := s.overviewCounted(ctx)
	if err != nil {
		return nil, err
	}
	if counted {
		return serverHoursCounted(ctx, s.pool, scope, hours)
	}
	return serverHoursDirect(ctx, s.pool, scope, hours)
}

// serverHoursDirect aggregates ServerHours over the ledger: what the counters must equal.
func serverHoursDirect(ctx context.Context, q querier, scope Scope, hours int) ([]ServerHour, error) {
	all, tenants := scopeArgs(scope)
	rows, err := q.Query(ctx, `SELECT t.server, date_trunc('hour', t.terminal_at, 'UTC') AS hour, count(*), coalesce(sum(t.polls), 0),
			count(*) FILTER (WHERE t.state IN ('failed', 'unobservable', 'expired') OR coalesce(t.tool_error, false)),
			coalesce(avg(extract(epoch FROM t.terminal_at - o.created_at)), 0)
		FROM tasks t JOIN operations o ON o.id = t.operation_id
		WHERE ($1 OR o.tenant = ANY($2)) AND t.terminal_at >= date_trunc('hour', now(), 'UTC') - ($3 - 1) * interval '1 hour'
		GROUP BY 1, 2 ORDER BY 1, 2`, all, tenants, hours)
	if err != nil {
		return nil, fmt.Errorf("server hours: %w", err)
	}
	return collectServerHours(rows)
}

// serverHoursCountedSQL is ServerHours from overview_server_hours and the operations still
// dirty ($1 all, $2 tenants, $3 hours).
var serverHoursCountedSQL = `WITH ` + pendCTE + `, ps AS (` + serverHoursOf("pend") + `),
	w AS (SELECT date_trunc('hour', now(), 'UTC') - ($3 - 1) * interval '1 hour' AS first)
	SELECT server, hour, sum(ended)::bigint, sum(polls)::bigint, sum(errors)::bigint,
		coalesce(sum(to_terminal) / nullif(sum(ended), 0)::numeric, 0) FROM (
		SELECT server, hour, ended, polls, errors, to_terminal FROM overview_server_hours
			WHERE ($1 OR tenant = ANY($2)) AND hour >= (SELECT first FROM w)
		UNION ALL SELECT server, hour, ended, polls, errors, to_terminal FROM ps WHERE hour >= (SELECT first FROM w)) x
	GROUP BY 1, 2 HAVING sum(ended) <> 0 ORDER BY 1, 2`

// serverHoursCounted reads ServerHours from the counters, in one statement.
func serverHoursCounted(ctx context.Context, q querier, scope Scope, hours int) ([]ServerHour, error) {
	all, tenants := scopeArgs(scope)
	rows, err := q.Query(ctx, serverHoursCountedSQL, all, tenants, hours)
	if err != nil {
		return nil, fmt.Errorf("server hours: %w", err)
	}
	return collectServerHours(rows)
}

func collectServerHours(rows pgx.Rows) ([]ServerHour, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ServerHour, error) {
		var h ServerHour
		var secs float64
		err := r.Scan(&h.Server, &h.Start, &h.Ended, &h.Polls, &h.Errors, &secs)
		h.MeanToTerminal = time.Duration(secs * float64(time.Second))
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("server hours: %w", err)
	}
	return out, nil
}
