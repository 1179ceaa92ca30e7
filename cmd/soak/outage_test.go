package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/pgcluster"
)

// TestDatabaseOutage stops PostgreSQL for 30 s under a console's load: every API request is
// answered 503 with Retry-After, /readyz says not ready, no operation is created, the calls
// in flight when it stopped are recorded or queued for reconciliation once it is back, and the
// console serves again by itself.
func TestDatabaseOutage(t *testing.T) {
	t.Parallel()
	if _, err := pgcluster.FindBinaries(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log strings.Builder
	w := &world{o: Options{Replicas: 1}.filled(), dir: t.TempDir()}
	defer w.close()
	if err := w.setup(ctx, &log); err != nil {
		t.Fatalf("setup: %v\n%s", err, log.String())
	}
	tr := &traffic{w: w, accepted: map[string]int{}, rng: rand.New(rand.NewPCG(1, 2))} //nolint:gosec // test choices
	addr := w.replicas[0].addr
	start := func(key, workflow string, args map[string]any) (int, http.Header, []byte, error) {
		raw, _ := json.Marshal(args)
		body, _ := json.Marshal(map[string]any{"workflow": workflow, "tenant": "acme", "actor": "app:outage", "arguments": json.RawMessage(raw)})
		st, b, hdr, err := tr.do(ctx, addr, http.MethodPost, "/api/v1/operations", key, body)
		return st, hdr, b, err
	}
	readyz := func() int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := w.client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// In flight when the database stops: Tasks that finish during the outage and synchronous
	// calls whose answers arrive while it is down.
	var taskIDs []string
	for i := range 4 {
		st, _, b, err := start(fmt.Sprintf("soak-task-%d", i), []string{"refund-legacy", "refund-ext"}[i%2], map[string]any{"duration_ms": 3000})
		if err != nil || st != http.StatusAccepted {
			t.Fatalf("start a task: %d %v %s", st, err, b)
		}
		var r struct {
			OperationID string `json:"operation_id"`
		}
		_ = json.Unmarshal(b, &r)
		taskIDs = append(taskIDs, r.OperationID)
	}
	var wg sync.WaitGroup
	syncStatus := make([]int, 3)
	for i := range syncStatus {
		wg.Add(1)
		go func() {
			defer wg.Done()
			syncStatus[i], _, _, _ = start(fmt.Sprintf("soak-sync-%d", i), "balance", map[string]any{"duration_ms": 2500})
		}()
	}
	time.Sleep(800 * time.Millisecond) // the synchronous calls are sent
	from := time.Now()
	if err := w.stopDatabase(); err != nil {
		t.Fatal(err)
	}
	var answered, with503, withRetryAfter, ready int
	n := 0
	for time.Since(from) < 30*time.Second {
		n++
		st, hdr, b, err := start(fmt.Sprintf("soak-outage-%d", n), "balance", map[string]any{"duration_ms": 10})
		if err != nil {
			t.Errorf("request %d during the outage: %v", n, err)
		} else {
			answered++
			if st == http.StatusServiceUnavailable {
				with503++
				if hdr.Get("Retry-After") != "" {
					withRetryAfter++
				}
			} else {
				t.Errorf("request %d during the outage answered %d: %s", n, st, b)
			}
		}
		if readyz() == http.StatusOK {
			ready++
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err := w.startDatabase(ctx); err != nil {
		t.Fatal(err)
	}
	to := time.Now()
	wg.Wait()
	t.Logf("outage %.1fs: %d requests answered, %d with 503, %d with Retry-After; /readyz ready %d times; in-flight sync answers %v",
		to.Sub(from).Seconds(), answered, with503, withRetryAfter, ready, syncStatus)
	if answered < 20 || with503 != answered || withRetryAfter != answered {
		t.Errorf("during the outage %d requests were answered, %d with 503 and %d with Retry-After", answered, with503, withRetryAfter)
	}
	if ready != 0 {
		t.Errorf("/readyz said ready %d times during the outage", ready)
	}
	// It recovers by itself: ready again and starting operations, without a restart.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, _, _, err := start(fmt.Sprintf("soak-after-%d", time.Now().UnixNano()), "balance", map[string]any{"duration_ms": 10})
		if err == nil && st == http.StatusCreated && readyz() == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving 60s after the database came back: %d %v", st, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("serving again %.1fs after the database came back", time.Since(to).Seconds())
	if !w.replicas[0].running() {
		t.Fatal("the console exited")
	}
	// Nothing was created while the database was down (it could not be), and none of the
	// refused requests was kept to be started later.
	var during, refused int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at BETWEEN $1 AND $2),
		count(*) FILTER (WHERE idempotency_key LIKE 'soak-outage-%') FROM operations`, from, to).Scan(&during, &refused); err != nil {
		t.Fatal(err)
	}
	if during != 0 || refused != 0 {
		t.Errorf("%d operations created during the outage, %d of the refused requests exist", during, refused)
	}
	// The calls in flight are recorded (the tasks' results) or queued for reconciliation.
	deadline = time.Now().Add(90 * time.Second)
	for {
		rows, err := w.rows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var open []string
		for _, r := range rows {
			if strings.HasPrefix(r.key, "soak-task-") || strings.HasPrefix(r.key, "soak-sync-") {
				if !r.settled() && !r.item {
					open = append(open, fmt.Sprintf("%s %s state=%q outcome=%q", r.key, r.route, r.state, r.outcome))
				}
			}
		}
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in-flight calls neither recorded nor queued 90s after the outage: %v", open)
		}
		time.Sleep(time.Second)
	}
	var completed int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM tasks WHERE operation_id = ANY($1::uuid[]) AND state = 'completed'`, taskIDs).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if completed != len(taskIDs) {
		t.Errorf("%d of %d tasks that finished during the outage were recorded completed", completed, len(taskIDs))
	}
}
