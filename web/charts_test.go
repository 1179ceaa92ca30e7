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
// servers, and the poll log's reads per server, tenant and hour, and checks every number the
// Servers page's charts show against a query of the database, for all tenants and for one
// tenant's scope; the window shrinks to the data (six hours) and grows when older data appears.
// (The watcher's reads reaching the poll log: watch's TestWatcherCountsEveryReadInThePollLog.)
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
	// The poll log: reads per tenant and hour, some failed; globex's are not acme's to see.
	if _, err := e.pool.Exec(ctx, `INSERT INTO server_poll_hours (server, tenant, hour, ok, errors) VALUES
		('rcv', 'acme', date_trunc('hour', now(), 'UTC'), 40, 3),
		('rcv', 'globex', date_trunc('hour', now(), 'UTC'), 100, 50),
		('rcv', 'acme', date_trunc('hour', now(), 'UTC') - interval '2 hours', 12, 0),
		('rcv', 'globex', date_trunc('hour', now(), 'UTC') - interval '4 hours', 0, 9),
		('ghost', 'acme', date_trunc('hour', now(), 'UTC'), 1000, 0)`); err != nil {
		t.Fatal(err)
	}
	check := func(who string, tenants []string, wantHours int) {
		t.Helper()
		_, body := e.do(t, who, http.MethodGet, "/servers", nil)
		chart := testidText(body, "server-chart-rcv", "figure")
		if chart == "" {
			t.Fatalf("no chart for rcv:\n%s", body)
		}
		got := chartRows(chart, "server-hour", "sh-polls", "sh-poll-errors", "sh-ended", "sh-mean", "sh-errors")
		if len(got) != wantHours {
			t.Errorf("%s: the chart shows %d hours, want %d", who, len(got), wantHours)
		}
		rows, err := e.pool.Query(ctx, `WITH ended AS (
				SELECT to_char(date_trunc('hour', t.terminal_at, 'UTC') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24') AS hour, count(*) AS n,
					count(*) FILTER (WHERE t.state IN ('failed', 'unobservable', 'expired') OR t.tool_error) AS errs, avg(t.terminal_at - o.created_at) AS mean
				FROM tasks t JOIN operations o ON o.id = t.operation_id
				WHERE t.server = 'rcv' AND t.terminal_at IS NOT NULL AND (o.tenant = ANY($1) OR $1 IS NULL) GROUP BY 1),
			reads AS (
				SELECT to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24') AS hour, sum(ok + errors) AS polls, sum(errors) AS failed
				FROM server_poll_hours WHERE server = 'rcv' AND (tenant = ANY($1) OR $1 IS NULL) GROUP BY 1)
			SELECT coalesce(ended.hour, reads.hour), coalesce(reads.polls, 0), coalesce(reads.failed, 0), coalesce(ended.n, 0),
				ended.mean, coalesce(ended.errs, 0)
			FROM ended FULL JOIN reads ON reads.hour = ended.hour`, tenants)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{}
		var totalReads, totalFailed int64
		for rows.Next() {
			var hour string
			var polls, failed int64
			var n, errs int
			var mean *time.Duration
			if err := rows.Scan(&hour, &polls, &failed, &n, &mean, &errs); err != nil {
				t.Fatal(err)
			}
			meanWords := "—"
			if mean != nil {
				meanWords = humanDur(mean.Round(100 * time.Millisecond))
			}
			want[hour] = []string{fmt.Sprint(polls), fmt.Sprint(failed), fmt.Sprint(n), meanWords, fmt.Sprint(errs)}
			totalReads, totalFailed = totalReads+polls, totalFailed+failed
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		for hour, w := range want {
			if g := got[hour]; strings.Join(g, "|") != strings.Join(w, "|") {
				t.Errorf("%s: hour %s: chart %v, database %v", who, hour, g, w)
			}
		}
		for hour, g := range got {
			if _, ok := want[hour]; !ok && strings.Join(g, "|") != "0|0|0|—|0" {
				t.Errorf("%s: hour %s has nothing in the database but the chart shows %v", who, hour, g)
			}
		}
		var total int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM tasks t JOIN operations o ON o.id = t.operation_id
			WHERE t.server = 'rcv' AND t.terminal_at IS NOT NULL AND (o.tenant = ANY($1) OR $1 IS NULL)`, tenants).Scan(&total); err != nil {
			t.Fatal(err)
		}
		if caption := strings.Join(strings.Fields(chart), " "); !strings.Contains(caption, fmt.Sprintf("%d reads (%d failed) · %d ended", totalReads, totalFailed, total)) {
			t.Errorf("%s: the caption does not say %d reads (%d failed) · %d ended:\n%s", who, totalReads, totalFailed, total, chart)
		}
	}
	check("viewer", nil, minChartHours)
	check("acme-viewer", []string{"acme"}, minChartHours)
	if _, err := e.pool.Exec(ctx, `UPDATE tasks SET state = 'completed', terminal_at = now() - interval '10 hours', polls = 9, next_poll_at = NULL WHERE operation_id = $1`, ids[5]); err != nil {
		t.Fatal(err)
	}
	check("viewer", nil, 11)
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
