package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// chartRows reads the values table rows of a chart: hour → the texts of the cells named.
func chartRows(body, rowID string, cells ...string) map[string][]string {
	out := map[string][]string{}
	for _, row := range testidAll(body, rowID, "tr") {
		hour := row[strings.Index(row, `data-hour="`)+len(`data-hour="`):]
		hour = hour[:strings.Index(hour, `"`)]
		var vals []string
		for _, c := range cells {
			vals = append(vals, firstText(testidText(row, c, "td")))
		}
		out[hour] = vals
	}
	return out
}

// TestServerChartsCountWhatTheQuerySays seeds tasks that ended in different hours, states and
// servers, and checks every number the Servers page's charts show against a query of the
// database; the window shrinks to the data (six hours) and grows when older data appears.
func TestServerChartsCountWhatTheQuerySays(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	ctx := context.Background()
	seed := []struct {
		state    string
		ago      string
		polls    int
		toolErr  bool
		server   string
		duration string
	}{
		{"completed", "3 hours", 4, false, "rcv", "2 seconds"},
		{"failed", "3 hours", 2, false, "rcv", "4 seconds"},
		{"completed", "0 hours", 7, true, "rcv", "1 second"},
		{"expired", "1 hour", 1, false, "rcv", "30 minutes"},
		{"completed", "0 hours", 100, false, "ghost", "1 second"},
		{"working", "", 3, false, "rcv", ""},
	}
	var ids []string
	for i, s := range seed {
		id := e.start(t, "acme", "refund", fmt.Sprintf("chart-%d", i), `{"outcome": "hang"}`)
		ids = append(ids, id)
		if s.ago == "" {
			continue
		}
		if _, err := e.pool.Exec(ctx, `UPDATE tasks SET state = $2, terminal_at = now() - $3::interval, polls = $4, tool_error = $5, server = $6, next_poll_at = NULL
			WHERE operation_id = $1`, id, s.state, s.ago, s.polls, s.toolErr, s.server); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE operations SET created_at = now() - $2::interval - $3::interval WHERE id = $1`, id, s.ago, s.duration); err != nil {
			t.Fatal(err)
		}
	}
	check := func(wantHours int) {
		t.Helper()
		_, body := e.do(t, "viewer", http.MethodGet, "/servers", nil)
		chart := testidText(body, "server-chart-rcv", "figure")
		if chart == "" {
			t.Fatalf("no chart for rcv:\n%s", body)
		}
		got := chartRows(chart, "server-hour", "sh-ended", "sh-polls", "sh-mean", "sh-errors")
		if len(got) != wantHours {
			t.Errorf("the chart shows %d hours, want %d", len(got), wantHours)
		}
		rows, err := e.pool.Query(ctx, `SELECT to_char(date_trunc('hour', t.terminal_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24'), count(*), sum(t.polls),
				count(*) FILTER (WHERE t.state IN ('failed', 'unobservable', 'expired') OR t.tool_error), avg(t.terminal_at - o.created_at)
			FROM tasks t JOIN operations o ON o.id = t.operation_id WHERE t.server = 'rcv' AND t.terminal_at IS NOT NULL GROUP BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{}
		for rows.Next() {
			var hour string
			var n, polls, errs int
			var mean time.Duration
			if err := rows.Scan(&hour, &n, &polls, &errs, &mean); err != nil {
				t.Fatal(err)
			}
			want[hour] = []string{fmt.Sprint(n), fmt.Sprint(polls), humanDur(mean.Round(100 * time.Millisecond)), fmt.Sprint(errs)}
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		for hour, w := range want {
			if g := got[hour]; strings.Join(g, "|") != strings.Join(w, "|") {
				t.Errorf("hour %s: chart %v, database %v", hour, g, w)
			}
		}
		for hour, g := range got {
			if _, ok := want[hour]; !ok && strings.Join(g, "|") != "0|0|—|0" {
				t.Errorf("hour %s has nothing in the database but the chart shows %v", hour, g)
			}
		}
		var total int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE server = 'rcv' AND terminal_at IS NOT NULL`).Scan(&total); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(chart, fmt.Sprintf("%d ended", total)) {
			t.Errorf("the caption does not say %d ended:\n%s", total, chart)
		}
	}
	check(minChartHours)
	if _, err := e.pool.Exec(ctx, `UPDATE tasks SET state = 'completed', terminal_at = now() - interval '10 hours', polls = 9, next_poll_at = NULL WHERE operation_id = $1`, ids[5]); err != nil {
		t.Fatal(err)
	}
	check(11)
}

// TestOverviewChartCountsEndedOperations: the overview's chart counts operations whose work
// ended, a synchronous call's answer as well as a task's final state, checked against the
// database, and its window shrinks to the hours with data.
func TestOverviewChartCountsEndedOperations(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	ctx := context.Background()
	task := e.start(t, "acme", "refund", "ov-1", `{"outcome": "hang"}`)
	if _, err := e.pool.Exec(ctx, `UPDATE tasks SET state = 'completed', terminal_at = now(), next_poll_at = NULL WHERE operation_id = $1`, task); err != nil {
		t.Fatal(err)
	}
	sync := e.start(t, "acme", "lookup", "ov-2", `{}`)
	var hasEnvelope bool
	if err := e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM task_envelopes WHERE operation_id = $1 AND finished_at IS NOT NULL)
		AND NOT EXISTS (SELECT 1 FROM tasks WHERE operation_id = $1)`, sync).Scan(&hasEnvelope); err != nil || !hasEnvelope {
		t.Fatalf("the synchronous call left no envelope of its own: %v %v", hasEnvelope, err)
	}
	_, body := e.do(t, "viewer", http.MethodGet, "/", nil)
	got := chartRows(body, "chart-hour", "ch-starts", "ch-ended", "ch-unknown")
	if len(got) != minChartHours {
		t.Errorf("the chart shows %d hours, want %d", len(got), minChartHours)
	}
	var hour string
	var starts, ended int
	if err := e.pool.QueryRow(ctx, `SELECT to_char(date_trunc('hour', now()) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24'),
		(SELECT count(*) FROM operations WHERE created_at >= date_trunc('hour', now())),
		(SELECT count(*) FROM operations o WHERE coalesce((SELECT terminal_at FROM tasks t WHERE t.operation_id = o.id),
			(SELECT finished_at FROM task_envelopes e WHERE e.operation_id = o.id AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.operation_id = o.id))) >= date_trunc('hour', now()))`).Scan(&hour, &starts, &ended); err != nil {
		t.Fatal(err)
	}
	if g := got[hour]; len(g) != 3 || g[0] != fmt.Sprint(starts) || g[1] != fmt.Sprint(ended) {
		t.Errorf("this hour: chart %v, database %d started, %d ended", g, starts, ended)
	}
	if ended < 2 {
		t.Errorf("the database has %d ended operations this hour; the seed made two", ended)
	}
}
