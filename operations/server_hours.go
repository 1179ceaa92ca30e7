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

// ServerHours reads ServerHours for scope.
func (s *Store) ServerHours(ctx context.Context, scope Scope, window time.Duration) ([]ServerHour, error) {
	hours := max(1, int(window/time.Hour))
	tenants := scope.Tenants
	if tenants == nil {
		tenants = []string{}
	}
	type key struct {
		server string
		hour   time.Time
	}
	byKey := map[key]*ServerHour{}
	at := func(server string, hour time.Time) *ServerHour {
		k := key{server, hour.UTC()}
		if h := byKey[k]; h != nil {
			return h
		}
		h := &ServerHour{Server: server, Start: hour.UTC()}
		byKey[k] = h
		return h
	}
	rows, err := s.pool.Query(ctx, `SELECT t.server, date_trunc('hour', t.terminal_at, 'UTC') AS hour, count(*),
			count(*) FILTER (WHERE t.state IN ('failed', 'unobservable', 'expired') OR coalesce(t.tool_error, false)),
			coalesce(avg(extract(epoch FROM t.terminal_at - o.created_at)), 0)
		FROM tasks t JOIN operations o ON o.id = t.operation_id
		WHERE ($1 OR o.tenant = ANY($2)) AND t.terminal_at >= date_trunc('hour', now(), 'UTC') - ($3 - 1) * interval '1 hour'
		GROUP BY 1, 2`, scope.All, tenants, hours)
	if err != nil {
		return nil, fmt.Errorf("server hours: %w", err)
	}
	var server string
	var hour time.Time
	var ended, errs int
	var secs float64
	if _, err := pgx.ForEachRow(rows, []any{&server, &hour, &ended, &errs, &secs}, func() error {
		h := at(server, hour)
		h.Ended, h.Errors, h.MeanToTerminal = ended, errs, time.Duration(secs*float64(time.Second))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("server hours: %w", err)
	}
	rows, err = s.pool.Query(ctx, `SELECT server, hour, sum(ok + errors), sum(errors) FROM server_poll_hours
		WHERE ($1 OR tenant = ANY($2)) AND hour >= date_trunc('hour', now(), 'UTC') - ($3 - 1) * interval '1 hour'
		GROUP BY 1, 2`, scope.All, tenants, hours)
	if err != nil {
		return nil, fmt.Errorf("server poll hours: %w", err)
	}
	var polls, pollErrs int64
	if _, err := pgx.ForEachRow(rows, []any{&server, &hour, &polls, &pollErrs}, func() error {
		h := at(server, hour)
		h.Polls, h.PollErrors = polls, pollErrs
		return nil
	}); err != nil {
		return nil, fmt.Errorf("server poll hours: %w", err)
	}
	out := make([]ServerHour, 0, len(byKey))
	for _, h := range byKey {
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b ServerHour) int {
		if c := strings.Compare(a.Server, b.Server); c != 0 {
			return c
		}
		return a.Start.Compare(b.Start)
	})
	return out, nil
}
