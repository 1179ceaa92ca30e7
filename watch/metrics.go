package watch

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/operations"
)

type metrics struct {
	polls         *prometheus.CounterVec
	pollOK        prometheus.Counter // polls{result="ok"}, the common case, looked up once
	lateness      prometheus.Histogram
	amplification prometheus.Histogram
	// inFlightAmplification is reads made over reads due across every held task, over the
	// last flush period.
	inFlightAmplification prometheus.Gauge
	violations            *prometheus.CounterVec
	budget                *prometheus.CounterVec
	notifications         prometheus.Counter
	stale                 prometheus.Counter
	inFlight              *prometheus.GaugeVec
}

// stateCollector reports tasks by state from the database at scrape time.
type stateCollector struct {
	store *operations.Store
	desc  *prometheus.Desc
}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rows, err := c.store.Pool().Query(ctx, `SELECT state, count(*) FROM tasks GROUP BY state`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var state string
		var n int64
		if rows.Scan(&state, &n) == nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), state)
		}
	}
}

func newMetrics(reg prometheus.Registerer, store *operations.Store) (*metrics, error) {
	m := &metrics{
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_watch_polls_total",
			Help: "tasks/get polls made by this replica, by result (ok, unknown_task, unauthorized, session_gone, unreachable)."}, []string{"result"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskgate_watch_poll_lateness_seconds",
			Help: "How late a poll started after it fell due, by the holder's own schedule.", Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}),
		amplification: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "taskgate_watch_polling_amplification",
			Help: "Per finished task: polls made divided by the polls its pollInterval implied.", Buckets: []float64{.25, .5, .75, 1, 1.25, 1.5, 2, 3, 5}}),
		inFlightAmplification: prometheus.NewGauge(prometheus.GaugeOpts{Name: "taskgate_watch_polling_amplification_in_flight",
			Help: "Status reads made divided by the reads the tasks' poll intervals implied, over every task this replica holds (in flight), during the last flush period."}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_watch_transition_violations_total",
			Help: "Observed violations of the task state machine, by kind (transition: a forbidden status change; task_id_changed: an answer naming another task)."}, []string{"kind"}),
		budget: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "taskgate_watch_budget_exhausted_total",
			Help: "Calls that ran out of their budget, by budget (status, result) and server."}, []string{"budget", "server"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "taskgate_watch_reads_in_flight",
			Help: "Status and result reads running, by server."}, []string{"server"}),
		notifications: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskgate_watch_notifications_total",
			Help: "Status notifications applied."}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{Name: "taskgate_watch_stale_observations_total",
			Help: "Status answers and notifications dropped because they contradict a final status stored after their reading began (by another connection or replica): not violations."}),
	}
	m.pollOK = m.polls.WithLabelValues("ok")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.polls, m.lateness, m.amplification, m.inFlightAmplification, m.violations, m.budget, m.notifications, m.stale, m.inFlight,
		stateCollector{store: store, desc: prometheus.NewDesc("taskgate_tasks", "Tasks by state.", []string{"state"}, nil)}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// poll is the counter of status reads with result.
func (m *metrics) poll(result string) prometheus.Counter {
	if result == "ok" {
		return m.pollOK
	}
	return m.polls.WithLabelValues(result)
}
