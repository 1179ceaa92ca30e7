package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Result is what a soak run found.
type Result struct {
	Seed             uint64
	Duration         time.Duration
	Operations       int
	ByRoute          map[string]int
	ByWorkflow       map[string]int // "workflow route" -> operations
	ByEnd            map[string]int // how they ended: task state, job status or outcome, and "+item"
	Settled          int            // terminal task (or job, sync answer, rejection) state
	WithItem         int            // a reconciliation or handoff item with a reason
	Lost             int            // operations with neither
	LostExamples     []string
	Unanswered       int // keys the traffic sent but no replica answered before the run ended
	UnansweredInDB   int // of those, how many the ledger holds anyway (checked like the rest)
	Crashes          int
	ReceiverRestarts int
	OutageS          float64
	Outage503        int64
	StartedInOutage  int // operations the ledger created while PostgreSQL was stopped (must be 0)
	ToolCalls        int
	Repeated         int // keys in more than one tools/call
	RepeatedExamples []string
	Effects          int
	Duplicates       int
	JobResubmits     int // job API submissions repeated with the same key (allowed: the job API is idempotent)
	AnswersAccepted  int
	AnswersDelivered int
	AnswersLost      int
	AnswersTwice     int
	AcceptedTwice    int
	Cancels          int64
	AfterDeadline    int // tasks read with tasks/get more than a second after their deadline
	Takeovers        int
	WaitedOut        int     // refund tasks expired at their deadline (only the expiring workflows' tasks are meant to)
	FailSafe         int     // Task starts rejected kill_switch_unknown (the kill switch unreadable)
	FailSafeAfter    int     // of those, created within a minute after the outage ended
	FailSafeLastS    float64 // the last of those, seconds after the outage ended
	TakeoverP50Ms    float64
	TakeoverP99Ms    float64
	TakeoverMissed   int
	Requests         int64
	ConnErrors       int64
	Unavailable      int64
	WithRetryAfter   int64
}

// Run runs one soak and checks it.
func Run(ctx context.Context, o Options, log io.Writer) (*Result, error) {
	o = o.filled()
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "taskgate-soak-")
		if err != nil {
			return nil, err
		}
		dir = d
		defer func() { _ = os.RemoveAll(d) }()
	} else if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // the server account must reach its cluster directory
		return nil, err
	}
	w := &world{o: o, dir: dir}
	defer w.close()
	fmt.Fprintf(log, "soak: %s of traffic at %.1f/s, %d replicas, PostgreSQL outage %s, seed %d\n", o.Duration, o.Rate, o.Replicas, o.Outage, o.Seed)
	if err := w.setup(ctx, log); err != nil {
		return nil, err
	}
	t := &traffic{w: w, accepted: map[string]int{}, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))} //nolint:gosec // choices of a test, not secrets
	res := &Result{Seed: o.Seed, Duration: o.Duration, ByRoute: map[string]int{}, ByWorkflow: map[string]int{}, ByEnd: map[string]int{}}
	outageAt := time.Now().Add(o.Duration * 3 / 5)
	t.quietFrom, t.quietTo = outageAt.Add(-10*time.Second), outageAt.Add(o.Outage+5*time.Second)

	opsCtx, stopOps := context.WithCancel(ctx)
	defer stopOps()
	runCtx, stopRun := context.WithTimeout(ctx, o.Duration)
	defer stopRun()
	var opsWG, bgWG sync.WaitGroup
	go t.person(opsCtx)
	bgWG.Add(1)
	go func() { defer bgWG.Done(); t.run(runCtx, opsCtx, o.Rate, &opsWG) }()

	var crashes []*crash
	var crashMu sync.Mutex
	var measureWG sync.WaitGroup
	bgWG.Add(1)
	go func() {
		defer bgWG.Done()
		t.chaos(runCtx, o.CrashEvery/2, o.CrashEvery*3/2, &crashes, &crashMu, &measureWG, log)
	}()

	var outageFrom, outageTo time.Time
	faultErr := make(chan error, 1)
	bgWG.Add(1)
	go func() {
		defer bgWG.Done()
		faultErr <- t.faults(runCtx, o, res, &outageFrom, &outageTo, log)
	}()
	<-runCtx.Done()
	bgWG.Wait()
	if err := <-faultErr; err != nil {
		return res, err
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	// Every replica runs again for the drain.
	for _, r := range w.replicas {
		if !r.running() {
			if err := w.startReplica(ctx, r); err != nil {
				return res, fmt.Errorf("replica %d after the run: %w", r.n, err)
			}
		}
	}
	fmt.Fprintf(log, "soak: traffic stopped; waiting up to %s for every operation to settle...\n", o.Drain)
	deadline := time.Now().Add(o.Drain)
	for {
		n, err := w.unsettled(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(log, "soak: %d operations still unsettled after %s\n", n, o.Drain)
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	stopOps()
	opsWG.Wait()
	measureWG.Wait()
	states, err := w.receiverStates()
	if err != nil {
		return res, err
	}
	crashMu.Lock()
	defer crashMu.Unlock()
	return res, w.check(ctx, t, states, crashes, outageFrom, outageTo, res)
}

// faults restarts the receiver at 40% of the run and stops PostgreSQL at 60% for o.Outage.
func (t *traffic) faults(ctx context.Context, o Options, res *Result, from, to *time.Time, log io.Writer) error {
	sleep := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	if !sleep(o.Duration * 2 / 5) {
		return nil
	}
	fmt.Fprintf(log, "soak: %s restarting the receiver (its tasks vanish)\n", time.Now().UTC().Format("15:04:05"))
	if err := t.w.restartReceiver(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	res.ReceiverRestarts++
	if !sleep(o.Duration / 5) {
		return nil
	}
	fmt.Fprintf(log, "soak: %s stopping PostgreSQL for %s\n", time.Now().UTC().Format("15:04:05"), o.Outage)
	t.outage.Store(true)
	begin := time.Now()
	if err := t.w.stopDatabase(); err != nil {
		return fmt.Errorf("stop PostgreSQL: %w", err)
	}
	// The window checked for starts is the one in which the server was surely down: from the end
	// of its shutdown (a commit may still land while it shuts down) to the start of its restart (it
	// accepts connections before the start returns).
	*from = time.Now()
	time.Sleep(o.Outage) // the outage runs its full length even when the traffic ends meanwhile
	*to = time.Now()
	if err := t.w.startDatabase(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start PostgreSQL again: %w", err)
	}
	t.outage.Store(false)
	res.OutageS = math.Round(time.Since(begin).Seconds()*10) / 10
	fmt.Fprintf(log, "soak: %s PostgreSQL is back after %.1fs\n", time.Now().UTC().Format("15:04:05"), res.OutageS)
	return nil
}

// opsSQL reads every soak operation with what says whether it settled.
const opsSQL = `
SELECT o.id::text, o.idempotency_key, o.route, o.workflow, o.created_at,
       coalesce(t.state, ''), coalesce(t.task_id, ''), t.deadline, coalesce(t.tool_error, false), coalesce(j.status, ''),
       EXISTS (SELECT 1 FROM reconciliation_items r WHERE r.operation_id = o.id AND r.reason <> ''),
       EXISTS (SELECT 1 FROM handoff_items h WHERE h.operation_id = o.id),
       NOT EXISTS (SELECT 1 FROM operation_calls c WHERE c.operation_id = o.id), o.domain_outcome, o.reason_code,
       coalesce((SELECT string_agg(p.input_key || '=' || p.state, ',') FROM pending_inputs p WHERE p.operation_id = o.id), '')
FROM operations o
LEFT JOIN tasks t ON t.operation_id = o.id
LEFT JOIN job_runs j ON j.operation_id = o.id
WHERE o.idempotency_key LIKE 'soak-%'`

type opRow struct {
	id, key, route, workflow string
	created                  time.Time
	state, taskID            string
	deadline                 *time.Time
	toolError                bool
	job                      string
	item, handoff            bool
	recorded                 bool   // the call's answer was recorded
	outcome                  string // domain outcome
	reason                   string // the route decision's reason code
	inputs                   string // its questions and their states (key=state,...)
}

func (r opRow) settled() bool {
	switch r.route {
	case "reject":
		return true
	case "job_api":
		return slices.Contains([]string{"succeeded", "failed", "refused", "not_sent"}, r.job)
	case "handoff":
		return false
	case "sync":
		return r.recorded && r.outcome != "pending"
	}
	return slices.Contains([]string{"completed", "failed", "cancelled", "unobservable", "expired"}, r.state)
}

func (w *world) rows(ctx context.Context) ([]opRow, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := w.pool.Query(qctx, opsSQL)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (opRow, error) {
		var o opRow
		return o, r.Scan(&o.id, &o.key, &o.route, &o.workflow, &o.created, &o.state, &o.taskID, &o.deadline, &o.toolError, &o.job, &o.item, &o.handoff, &o.recorded, &o.outcome, &o.reason, &o.inputs)
	})
}

func (w *world) unsettled(ctx context.Context) (int, error) {
	rows, err := w.rows(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rows {
		if !r.settled() && !r.item && !r.handoff {
			n++
		}
	}
	return n, nil
}

// deadlineGrace is how long after a task's deadline a read may still arrive: one started
// just before the deadline reaches the receiver a moment later.
const deadlineGrace = time.Second

func (w *world) check(ctx context.Context, t *traffic, states []rcvState, crashes []*crash, outFrom, outTo time.Time, res *Result) error {
	rows, err := w.rows(ctx)
	if err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	byKey := map[string]opRow{}
	byID := map[string]opRow{}
	for _, r := range rows {
		byKey[r.key], byID[r.id] = r, r
		res.Operations++
		res.ByRoute[r.route]++
		res.ByWorkflow[r.workflow+" "+r.route]++
		end := r.route + ":" + r.state
		switch r.route {
		case "job_api":
			end = "job:" + r.job
		case "sync", "handoff":
			end = r.route + ":" + r.outcome
		case "reject":
			end = "reject:" + r.reason
		}
		if r.item || r.handoff {
			end += "+item"
		}
		res.ByEnd[end]++
		switch {
		case r.settled():
			res.Settled++
		case r.item || r.handoff:
			res.WithItem++
		default:
			res.Lost++
			if len(res.LostExamples) < 5 {
				res.LostExamples = append(res.LostExamples, fmt.Sprintf("%s %s route=%s state=%q job=%q questions=%q deadline=%v", r.id, r.workflow, r.route, r.state, r.job, r.inputs, r.deadline))
			}
		}
		if !outFrom.IsZero() && r.created.After(outFrom) && r.created.Before(outTo) {
			res.StartedInOutage++
		}
		if r.state == "expired" && strings.HasPrefix(r.workflow, "refund-") {
			res.WaitedOut++
		}
		if r.reason == "kill_switch_unknown" {
			res.FailSafe++
			if after := r.created.Sub(outTo); !outTo.IsZero() && after >= 0 && after < time.Minute {
				res.FailSafeAfter++
				res.FailSafeLastS = max(res.FailSafeLastS, math.Round(after.Seconds()*10)/10)
			}
		}
	}
	t.mu.Lock()
	for _, s := range t.ops {
		if s.opID == "" {
			res.Unanswered++
			if _, ok := byKey[s.key]; ok {
				res.UnansweredInDB++
			}
		} else if _, ok := byID[s.opID]; !ok {
			res.Lost++ // answered with an id the ledger does not hold
			res.LostExamples = append(res.LostExamples, "answered but missing: "+s.opID)
		}
	}
	accepted := maps(t.accepted)
	t.mu.Unlock()

	_, lastGet := tallyReceivers(states, res)
	// Answers: each one accepted reached its task (the input is answered and the task did not
	// end "not approved"), or its operation is settled some other way with an item.
	inputs, err := w.inputStates(ctx)
	if err != nil {
		return err
	}
	for id, n := range accepted {
		res.AnswersAccepted++
		if n > 1 {
			res.AcceptedTwice++
		}
		opID, _, _ := strings.Cut(id, " ")
		r := byID[opID]
		switch {
		case inputs[id] != "answered":
			res.AnswersLost++
		case r.state == "completed" && r.toolError && !r.item:
			res.AnswersLost++ // the server did not get the approval
		case !r.settled() && !r.item:
			res.AnswersLost++
		}
	}
	for _, r := range rows {
		if r.deadline != nil && r.taskID != "" {
			if at, ok := lastGet[r.taskID]; ok && at.After(r.deadline.Add(deadlineGrace)) {
				res.AfterDeadline++
			}
		}
	}
	var all []time.Duration
	for _, c := range crashes {
		res.Crashes++
		all = append(all, c.takeover...)
		res.TakeoverMissed += c.missed
	}
	res.Takeovers = len(all)
	res.TakeoverP50Ms, res.TakeoverP99Ms = quantileMs(all, 0.5), quantileMs(all, 0.99)
	res.Cancels = t.stats.cancels.Load()
	res.Outage503 = t.stats.outage503.Load()
	res.Requests, res.ConnErrors = t.stats.attempts.Load(), t.stats.connErrors.Load()
	res.Unavailable, res.WithRetryAfter = t.stats.unavailable.Load(), t.stats.retryAfter.Load()
	return nil
}

func joinCounts(m map[string]int) string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (w *world) inputStates(ctx context.Context) (map[string]string, error) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := w.pool.Query(qctx, `SELECT operation_id::text || ' ' || input_key, state FROM pending_inputs`)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var k, s string
	_, err = pgx.ForEachRow(rows, []any{&k, &s}, func() error { out[k] = s; return nil })
	return out, err
}

func quantileMs(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return math.Round(float64(s[max(0, min(i, len(s)-1))]) / float64(time.Millisecond))
}

// failures names each invariant the run broke.
func (r *Result) failures() []string {
	var f []string
	add := func(bad bool, s string) {
		if bad {
			f = append(f, s)
		}
	}
	add(r.Operations == 0, "no operation was started")
	add(r.Lost > 0, fmt.Sprintf("%d operations lost", r.Lost))
	add(r.AnswersLost > 0, fmt.Sprintf("%d answers lost", r.AnswersLost))
	add(r.Repeated > 0, fmt.Sprintf("%d keys repeated in tools/call", r.Repeated))
	add(r.AnswersTwice > 0 || r.AcceptedTwice > 0, fmt.Sprintf("%d answers delivered twice, %d accepted twice", r.AnswersTwice, r.AcceptedTwice))
	add(r.Duplicates > 0, fmt.Sprintf("%d duplicate effects", r.Duplicates))
	add(r.AfterDeadline > 0, fmt.Sprintf("%d tasks read after their deadline", r.AfterDeadline))
	add(r.StartedInOutage > 0, fmt.Sprintf("%d operations started while PostgreSQL was stopped", r.StartedInOutage))
	add(r.TakeoverMissed > 0, fmt.Sprintf("%d tasks of a killed replica not claimed again within 2 minutes", r.TakeoverMissed))
	add(r.Crashes == 0, "no replica was killed")
	add(r.ReceiverRestarts == 0, "the receiver was not restarted")
	add(r.OutageS == 0, "PostgreSQL was not stopped")
	return f
}

func (r *Result) lostTotal() int     { return r.Lost + r.AnswersLost }
func (r *Result) repeatedTotal() int { return r.Repeated + r.AnswersTwice + r.AcceptedTwice }

func (r *Result) print(w io.Writer) {
	routes := make([]string, 0, len(r.ByRoute))
	for k, v := range r.ByRoute {
		routes = append(routes, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(routes)
	ok := func(bad bool) string {
		if bad {
			return "FAIL"
		}
		return "ok"
	}
	fmt.Fprintf(w, "\nTaskgate soak (%s of traffic, seed %d)\n", r.Duration, r.Seed)
	row := func(check, value, verdict string) { fmt.Fprintf(w, "  %-56s %-28s %s\n", check, value, verdict) }
	row("operations (by route)", fmt.Sprint(r.Operations), strings.Join(routes, ", "))
	row("  by workflow", "", joinCounts(r.ByWorkflow))
	row("  by end", "", joinCounts(r.ByEnd))
	row("terminal state", fmt.Sprint(r.Settled), "")
	row("reconciliation or handoff item with a reason", fmt.Sprint(r.WithItem), "")
	row("neither (lost)", fmt.Sprint(r.Lost), ok(r.Lost > 0))
	row("keys no replica answered before the end", fmt.Sprintf("%d (%d in the ledger)", r.Unanswered, r.UnansweredInDB), "")
	row("replica crashes (kill -9) and restarts", fmt.Sprint(r.Crashes), ok(r.Crashes == 0))
	row("receiver restarts (tasks vanish)", fmt.Sprint(r.ReceiverRestarts), ok(r.ReceiverRestarts == 0))
	row("PostgreSQL outage", fmt.Sprintf("%.1fs, %d answers 503", r.OutageS, r.Outage503), ok(r.OutageS == 0))
	row("operations created during the outage", fmt.Sprint(r.StartedInOutage), ok(r.StartedInOutage > 0))
	row("refund tasks that waited until their deadline (expired)", fmt.Sprint(r.WaitedOut), "expected 0: each is a question closed while its server still asked, or a lost cancel")
	row("Task starts blocked: kill switch unreadable (fail-safe)", fmt.Sprint(r.FailSafe),
		fmt.Sprintf("%d within a minute after the outage, the last %.1fs after it", r.FailSafeAfter, r.FailSafeLastS))
	row("tools/call received / keys repeated", fmt.Sprintf("%d / %d", r.ToolCalls, r.Repeated), ok(r.Repeated > 0))
	row("effects applied / duplicates", fmt.Sprintf("%d / %d", r.Effects, r.Duplicates), ok(r.Duplicates > 0))
	row("job API resubmits of one key (idempotent, allowed)", fmt.Sprint(r.JobResubmits), "")
	row("answers accepted / delivered", fmt.Sprintf("%d / %d", r.AnswersAccepted, r.AnswersDelivered), "")
	row("answers lost / delivered twice / accepted twice", fmt.Sprintf("%d / %d / %d", r.AnswersLost, r.AnswersTwice, r.AcceptedTwice),
		ok(r.AnswersLost+r.AnswersTwice+r.AcceptedTwice > 0))
	row("cancels accepted", fmt.Sprint(r.Cancels), "")
	row("tasks read after their deadline (+1s)", fmt.Sprint(r.AfterDeadline), ok(r.AfterDeadline > 0))
	row("takeover p50 / p99 (crash to claimed again)", fmt.Sprintf("%.0f / %.0f ms over %d tasks", r.TakeoverP50Ms, r.TakeoverP99Ms, r.Takeovers),
		ok(r.TakeoverMissed > 0))
	row("API requests / connection errors / 503 or 429", fmt.Sprintf("%d / %d / %d", r.Requests, r.ConnErrors, r.Unavailable),
		fmt.Sprintf("%d with Retry-After", r.WithRetryAfter))
	for _, e := range r.LostExamples {
		fmt.Fprintln(w, "  lost:", e)
	}
	for _, e := range r.RepeatedExamples {
		fmt.Fprintln(w, "  repeated:", e)
	}
	fmt.Fprintf(w, "soak: operations %d crashes %d receiver_restarts %d outage_s %.0f lost %d repeated %d duplicates %d takeover_p99_ms %.0f\n",
		r.Operations, r.Crashes, r.ReceiverRestarts, r.OutageS, r.lostTotal(), r.repeatedTotal(), r.Duplicates, r.TakeoverP99Ms)
}

// tallyReceivers adds up what every receiver process saw: tools/call per key (repeated), effects
// per key (duplicates, also across processes), answer deliveries (twice) and job resubmits. It
// returns the deliveries per answer and each task's last tasks/get.
func tallyReceivers(states []rcvState, res *Result) (map[string]int, map[string]time.Time) {
	calls := map[string]int{}
	applied := map[string]int{}
	answers := map[string]int{}
	lastGet := map[string]time.Time{}
	for _, st := range states {
		for k, n := range st.ToolCallsByKey {
			calls[k] += n
		}
		for _, k := range st.Applied {
			applied[k]++
		}
		res.Duplicates += st.EffectsRefused
		for k, n := range st.Answers {
			answers[k] += n
		}
		for id, at := range st.LastGet {
			if at.After(lastGet[id]) {
				lastGet[id] = at
			}
		}
		for _, n := range st.JobSubmits {
			if n > 1 {
				res.JobResubmits++
			}
		}
	}
	for k, n := range calls {
		res.ToolCalls += n
		if n > 1 {
			res.Repeated++
			if len(res.RepeatedExamples) < 5 {
				res.RepeatedExamples = append(res.RepeatedExamples, fmt.Sprintf("%s x%d", k, n))
			}
		}
	}
	for _, n := range applied {
		res.Effects += n
		if n > 1 {
			res.Duplicates += n - 1
		}
	}
	for _, n := range answers {
		res.AnswersDelivered++
		if n > 1 {
			res.AnswersTwice++
		}
	}
	return answers, lastGet
}
