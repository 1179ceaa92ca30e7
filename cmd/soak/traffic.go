package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// scenario is one kind of operation the traffic starts.
type scenario struct {
	name     string
	weight   int
	workflow func(rng *rand.Rand) string
	args     func(rng *rand.Rand) map[string]any
	cancel   bool // cancelled by the soak a moment after it starts
}

func either(a, b string) func(*rand.Rand) string {
	return func(rng *rand.Rand) string {
		if rng.IntN(2) == 0 {
			return a
		}
		return b
	}
}

func fixed(w string) func(*rand.Rand) string { return func(*rand.Rand) string { return w } }

func work(lo, hi int, extra map[string]any) func(*rand.Rand) map[string]any {
	return func(rng *rand.Rand) map[string]any {
		m := map[string]any{"duration_ms": lo + rng.IntN(hi-lo+1)}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
}

var scenarios = []scenario{
	{name: "refund completes", weight: 18, workflow: either("refund-legacy", "refund-ext"), args: work(500, 3000, nil)},
	{name: "refund asks a person", weight: 12, workflow: either("refund-legacy", "refund-ext"),
		args: work(200, 1500, map[string]any{"outcome": "input", "input_message": "Approve this refund?"})},
	{name: "refund declined", weight: 5, workflow: either("refund-legacy", "refund-ext"),
		args: work(200, 1500, map[string]any{"outcome": "tool_error", "text": "declined by the system of record"})},
	{name: "refund cancelled", weight: 6, workflow: either("refund-legacy", "refund-ext"), args: work(0, 0, map[string]any{"outcome": "hang"}), cancel: true},
	{name: "report", weight: 15, workflow: either("report-legacy", "report-ext"), args: work(300, 2000, nil)},
	{name: "expires", weight: 3, workflow: either("expiring-legacy", "expiring-ext"), args: work(0, 0, map[string]any{"outcome": "hang"})},
	{name: "balance (sync)", weight: 15, workflow: fixed("balance"), args: work(20, 300, nil)},
	{name: "payout (job API)", weight: 10, workflow: fixed("payout"), args: func(*rand.Rand) map[string]any { return map[string]any{} }},
	{name: "kyc (handoff)", weight: 4, workflow: fixed("kyc"), args: func(*rand.Rand) map[string]any { return map[string]any{} }},
	{name: "closure (reject)", weight: 4, workflow: fixed("closure"), args: func(*rand.Rand) map[string]any { return map[string]any{} }},
}

func pick(rng *rand.Rand) scenario {
	total := 0
	for _, s := range scenarios {
		total += s.weight
	}
	n := rng.IntN(total)
	for _, s := range scenarios {
		if n < s.weight {
			return s
		}
		n -= s.weight
	}
	return scenarios[0]
}

// sent is one operation the traffic asked for.
type sent struct {
	key, workflow, scenario string
	opID                    string // from the first answer; "" while unanswered
	status                  int
}

// counters of the traffic, the person and the outage.
type trafficStats struct {
	attempts, connErrors, unavailable, retryAfter, otherErrors atomic.Int64
	answersAccepted, answerAttempts, cancels                   atomic.Int64
	outage503, outageStarted                                   atomic.Int64
}

// traffic drives the API of whichever replicas run.
type traffic struct {
	w     *world
	stats trafficStats
	mu    sync.Mutex
	ops   []*sent
	// accepted counts API acceptances of each answer (operation id + input key).
	accepted map[string]int
	outage   atomic.Bool
	// quietFrom and quietTo bound the time around the outage when no replica is killed.
	quietFrom, quietTo time.Time
	seq                atomic.Int64
	rngMu              sync.Mutex
	rng                *rand.Rand
}

func (t *traffic) intn(n int) int {
	t.rngMu.Lock()
	defer t.rngMu.Unlock()
	return t.rng.IntN(n)
}

// call sends one API request to a running replica, trying others on a connection error, a 503
// or a 429 until ctx ends. It returns the status and body of the first other answer.
func (t *traffic) call(ctx context.Context, method, path, key string, body []byte) (int, []byte, error) {
	backoff := 100 * time.Millisecond
	for {
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		live := t.w.live(t.intn)
		if len(live) == 0 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		r := live[0]
		t.stats.attempts.Add(1)
		status, b, hdr, err := t.do(ctx, r.addr, method, path, key, body)
		switch {
		case err != nil:
			t.stats.connErrors.Add(1)
		case status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests:
			t.stats.unavailable.Add(1)
			if t.outage.Load() {
				t.stats.outage503.Add(1)
			}
			if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err == nil && ra > 0 {
				t.stats.retryAfter.Add(1)
				backoff = min(time.Duration(ra)*time.Second, 2*time.Second)
			}
		default:
			return status, b, nil
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

func (t *traffic) do(ctx context.Context, addr, method, path, key string, body []byte) (int, []byte, http.Header, error) {
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, "http://"+addr+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+t.w.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := t.w.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, b, resp.Header, nil
}

// startOne starts one operation and, for a cancel scenario, cancels it a moment later.
func (t *traffic) startOne(ctx context.Context, wg *sync.WaitGroup) {
	t.rngMu.Lock()
	sc := pick(t.rng)
	wf := sc.workflow(t.rng)
	args := sc.args(t.rng)
	tenant := []string{"acme", "globex"}[t.rng.IntN(2)]
	t.rngMu.Unlock()
	n := t.seq.Add(1)
	s := &sent{key: fmt.Sprintf("soak-%d-%d", time.Now().UnixNano(), n), workflow: wf, scenario: sc.name}
	t.mu.Lock()
	t.ops = append(t.ops, s)
	t.mu.Unlock()
	raw, _ := json.Marshal(args)
	body, _ := json.Marshal(map[string]any{"workflow": wf, "tenant": tenant, "actor": "app:soak", "object_ref": fmt.Sprintf("%s #%d", wf, n),
		"intended_effect": sc.name, "arguments": json.RawMessage(raw)})
	if t.outage.Load() {
		t.stats.outageStarted.Add(1)
	}
	status, b, err := t.call(ctx, http.MethodPost, "/api/v1/operations", s.key, body)
	if err != nil {
		return
	}
	var resp struct {
		OperationID string `json:"operation_id"`
	}
	_ = json.Unmarshal(b, &resp)
	t.mu.Lock()
	s.opID, s.status = resp.OperationID, status
	t.mu.Unlock()
	if status >= 300 && status != http.StatusConflict {
		t.stats.otherErrors.Add(1)
	}
	if sc.cancel && resp.OperationID != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(500+t.intn(2000)) * time.Millisecond):
			}
			cb, _ := json.Marshal(map[string]string{"reason": "soak: the customer withdrew"})
			if st, _, err := t.call(ctx, http.MethodPost, "/api/v1/operations/"+resp.OperationID+"/cancel", "", cb); err == nil && st == http.StatusAccepted {
				t.stats.cancels.Add(1)
			}
		}()
	}
}

// run starts operations at rate per second until tickCtx ends; each keeps trying to be
// answered (and cancelled) until opsCtx ends.
func (t *traffic) run(tickCtx, opsCtx context.Context, rate float64, wg *sync.WaitGroup) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for {
		select {
		case <-tickCtx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.startOne(opsCtx, wg)
		}()
	}
}

// person answers every open question the way a scripted person would: approve, once.
func (t *traffic) person(ctx context.Context) {
	inFlight := map[string]bool{}
	var mu sync.Mutex
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rows, err := t.w.pool.Query(qctx, `SELECT p.operation_id::text, p.input_key FROM pending_inputs p
			JOIN operations o ON o.id = p.operation_id WHERE p.state = 'open' AND o.idempotency_key LIKE 'soak-%'`)
		var open [][2]string
		if err == nil {
			open, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
				var a [2]string
				return a, r.Scan(&a[0], &a[1])
			})
		}
		cancel()
		if err != nil {
			continue
		}
		for _, q := range open {
			id := q[0] + " " + q[1]
			mu.Lock()
			busy := inFlight[id]
			inFlight[id] = true
			mu.Unlock()
			if busy {
				continue
			}
			go func() {
				defer func() { mu.Lock(); delete(inFlight, id); mu.Unlock() }()
				body, _ := json.Marshal(map[string]any{"key": q[1], "action": "accept", "content": map[string]any{"approve": true}})
				t.stats.answerAttempts.Add(1)
				actx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				st, _, err := t.call(actx, http.MethodPost, "/api/v1/operations/"+q[0]+"/input", "", body)
				if err == nil && st == http.StatusAccepted {
					t.stats.answersAccepted.Add(1)
					t.mu.Lock()
					t.accepted[id]++
					t.mu.Unlock()
				}
			}()
		}
	}
}

// crash is one kill -9 of a replica and how long its tasks took to be claimed again.
type crash struct {
	at       time.Time
	replica  int
	leased   int             // its unexpired leases of watched tasks at the kill
	takeover []time.Duration // per task: until another replica claimed it or it ended
	missed   int             // tasks not claimed again within two minutes
}

// chaos kills a random replica at random moments and starts it again, until ctx ends.
func (t *traffic) chaos(ctx context.Context, lo, hi time.Duration, crashes *[]*crash, mu *sync.Mutex, wg *sync.WaitGroup, log io.Writer) {
	for {
		wait := lo + time.Duration(t.intn(int(hi-lo)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if now := time.Now(); t.outage.Load() || (now.After(t.quietFrom) && now.Before(t.quietTo)) {
			continue // a crash beside the outage would measure the outage, not the takeover
		}
		live := t.w.live(t.intn)
		if len(live) < 2 {
			continue
		}
		r := live[0]
		r.mu.Lock()
		id := r.id
		r.mu.Unlock()
		c := &crash{replica: r.n}
		var leased []string
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rows, err := t.w.pool.Query(qctx, `SELECT operation_id::text FROM tasks WHERE lease_owner = $1 AND lease_expires_at > now()
			AND (state IN ('working', 'input_required') OR result_state = 'pending')`, id)
		if err == nil {
			leased, _ = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		cancel()
		c.at = time.Now()
		t.w.kill(r)
		c.leased = len(leased)
		mu.Lock()
		*crashes = append(*crashes, c)
		mu.Unlock()
		fmt.Fprintf(log, "soak: %s kill -9 replica %d (%d leased tasks)\n", time.Now().UTC().Format("15:04:05"), r.n, len(leased))
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, missed := t.w.takeover(context.WithoutCancel(ctx), id, c.at, leased)
			mu.Lock()
			c.takeover, c.missed = d, missed
			mu.Unlock()
		}()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(300+t.intn(2500)) * time.Millisecond):
		}
		for {
			if err := t.w.startReplica(context.WithoutCancel(ctx), r); err == nil {
				break
			} else {
				fmt.Fprintf(log, "soak: replica %d did not start again (%v); retrying\n", r.n, err)
			}
			time.Sleep(time.Second)
		}
	}
}

// takeover waits until each of the dead replica's tasks is claimed by another replica or is
// no longer watched, and returns how long each took from the kill (sampled every 50 ms).
func (w *world) takeover(ctx context.Context, dead string, at time.Time, ids []string) ([]time.Duration, int) {
	var out []time.Duration
	left := map[string]bool{}
	for _, id := range ids {
		left[id] = true
	}
	deadline := at.Add(2 * time.Minute)
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		keys := make([]string, 0, len(left))
		for k := range left {
			keys = append(keys, k)
		}
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		rows, err := w.pool.Query(qctx, `SELECT operation_id::text FROM tasks WHERE operation_id = ANY($1::uuid[])
			AND (lease_owner IS DISTINCT FROM $2 OR NOT (state IN ('working', 'input_required') OR result_state = 'pending'))`, keys, dead)
		var moved []string
		if err == nil {
			moved, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		cancel()
		if err != nil {
			continue
		}
		now := time.Since(at)
		for _, id := range moved {
			if left[id] {
				delete(left, id)
				out = append(out, now)
			}
		}
	}
	return out, len(left)
}
