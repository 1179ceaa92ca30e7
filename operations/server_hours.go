package operations

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ServerHour is what one server's tasks did in one hour: the status reads the watchers made of
// them in the hour (the poll log), and the tasks that reached their final state in the hour.
type ServerHour struct {
	// Server is the MCP server's name in the policy.
	Server string `json:"server"`
	// Start is the start of the hour (UTC).
	Start time.Time `json:"start"`
	// Polls counts the status reads the watchers made of the server's tasks in the hour,
	// answered or failed (PollLog).
	Polls int64 `json:"polls"`
	// PollErrors counts those of Polls that failed (no answer, an error answer, refused).
	PollErrors int64 `json:"poll_errors"`
	// Ended counts the tasks that reached a final state in the hour.
	Ended int `json:"ended"`
	// Errors counts those that ended failed, with a tool error, unobservable or expired.
	Errors int `json:"errors"`
	// MeanToTerminal is the mean time from the start of the operation to its task's final
	// state, over the tasks that ended in the hour (0 when none did).
	MeanToTerminal time.Duration `json:"mean_to_terminal"`
}

// ServerHours returns, per server and hour over the last window (at least an hour), the status
// reads made of the tasks in scope and the tasks in scope that ended in that hour: hours with
// neither are left out.
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
	var ended []ServerHour
	if counted {
		ended, err = serverHoursCounted(ctx, s.pool, scope, hours)
	} else {
		ended, err = serverHoursDirect(ctx, s.pool, scope, hours)
	}
	if err != nil {
		return nil, err
	}
	return withPolls(ctx, s.pool, scope, hours, ended)
}

// withPolls adds the status reads of the poll log (server_poll_hours) to the hours of the
// tasks that ended, and the hours with reads and no task ended.
func withPolls(ctx context.Context, q querier, scope Scope, hours int, ended []ServerHour) ([]ServerHour, error) {
	type key struct {
		server string
		hour   time.Time
	}
	byKey := make(map[key]*ServerHour, len(ended))
	for i := range ended {
		h := &ended[i]
		byKey[key{h.Server, h.Start.UTC()}] = h
	}
	all, tenants := scopeArgs(scope)
	rows, err := q.Query(ctx, `SELECT server, hour, sum(ok + errors), sum(errors) FROM server_poll_hours
		WHERE ($1 OR tenant = ANY($2)) AND hour >= date_trunc('hour', now(), 'UTC') - ($3 - 1) * interval '1 hour'
		GROUP BY 1, 2`, all, tenants, hours)
	if err != nil {
		return nil, fmt.Errorf("server poll hours: %w", err)
	}
	var server string
	var hour time.Time
	var polls, pollErrs int64
	var extra []ServerHour
	if _, err := pgx.ForEachRow(rows, []any{&server, &hour, &polls, &pollErrs}, func() error {
		if h := byKey[key{server, hour.UTC()}]; h != nil {
			h.Polls, h.PollErrors = polls, pollErrs
			return nil
		}
		extra = append(extra, ServerHour{Server: server, Start: hour.UTC(), Polls: polls, PollErrors: pollErrs})
		return nil
	}); err != nil {
		return nil, fmt.Errorf("server poll hours: %w", err)
	}
	out := append(ended, extra...)
	slices.SortFunc(out, func(a, b ServerHour) int {
		if c := strings.Compare(a.Server, b.Server); c != 0 {
			return c
		}
		return a.Start.Compare(b.Start)
	})
	return out, nil
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
		var taskPolls int64 // the polls the ended tasks took: the chart reads the poll log instead
		err := r.Scan(&h.Server, &h.Start, &h.Ended, &taskPolls, &h.Errors, &secs)
		h.MeanToTerminal = time.Duration(secs * float64(time.Second))
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("server hours: %w", err)
	}
	return out, nil
}
