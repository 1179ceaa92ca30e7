package reconcile_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// more are the workflows these tests add: an effectful sync call and a job without verifiers,
// and a job API behind a loopback proxy (%s) whose status answers a test can spoil.
const more = `
  - {name: charge-sync-nv, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: sync, max_duration: 2s},
     owners: [ops], idempotency_argument: idempotency_key}
  - {name: payout-proxy, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "%[1]s"},
     owners: [ops], verifier: {kind: job_api}, budgets: {reconcile: {timeout: 2s}}}
  - {name: charge-sync-mv, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: sync, max_duration: 2s},
     owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: none, manual: true}}
  - {name: refund-mv, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: none, manual: true}}
  - {name: payout-mv, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "%[1]s"},
     owners: [ops], verifier: {kind: none, manual: true}}
`

// jobProxy stands in front of the receiver's job API; once spoiled, GET /jobs/{id} answers
// 503, as a job API that lost track of its jobs would.
type jobProxy struct {
	target  atomic.Pointer[url.URL]
	spoiled atomic.Bool
	srv     *httptest.Server
}

func newJobProxy(t *testing.T) *jobProxy {
	t.Helper()
	p := &jobProxy{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.spoiled.Load() && r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/jobs/") {
			http.Error(w, "job store unavailable", http.StatusServiceUnavailable)
			return
		}
		u := *p.target.Load()
		u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
		req, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer res.Body.Close()
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = io.Copy(w, res.Body)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// setupMore is setup with the workflows of more.
func setupMore(t *testing.T) (*world, *jobProxy) {
	t.Helper()
	p := newJobProxy(t)
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Extra: extra + fmt.Sprintf(more, p.srv.URL)})
	u, err := url.Parse(b.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	p.target.Store(u)
	w := &world{Bundle: b, rs: reconcile.NewStore(b.Pool, reconcile.Options{Retrier: b.Ops})}
	return w, p
}

// checked reports whether the verifiers finished the outcome check of an operation.
func (w *world) checked(t *testing.T, opID string) bool {
	t.Helper()
	var done bool
	if err := w.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM outcome_checks WHERE operation_id = $1 AND done_at IS NOT NULL)`,
		opID).Scan(&done); err != nil {
		t.Fatal(err)
	}
	return done
}

// TestNoVerifierAsksAPerson: a workflow with verifier none and manual verification whose task,
// sync call or job ended opens a manual_verification item for a person at once, with the
// outcome unknown; without manual verification it ends unverified with no item; a read-only one
// has no effect to confirm and ends no_effect.
func TestNoVerifierAsksAPerson(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, workflow, args string
		wantItem             bool
		trigger              string
		want                 operations.Outcome // without an item
	}{
		{name: "task completed", workflow: "refund-mv", args: `{"duration_ms": 10}`, wantItem: true, trigger: "task_terminal"},
		{name: "sync call answered", workflow: "charge-sync-mv", args: `{"duration_ms": 10}`, wantItem: true, trigger: "sync_answer"},
		{name: "job ended", workflow: "payout-mv", args: `{"duration_ms": 10}`, wantItem: true, trigger: "job_answer"},
		{name: "task completed, unverified", workflow: "refund-nv", args: `{"duration_ms": 10}`, trigger: "task_terminal", want: operations.OutcomeUnverified},
		{name: "sync call answered, unverified", workflow: "charge-sync-nv", args: `{"duration_ms": 10}`, trigger: "sync_answer", want: operations.OutcomeUnverified},
		{name: "job ended, unverified", workflow: "payout", args: `{"duration_ms": 10}`, trigger: "job_answer", want: operations.OutcomeUnverified},
		{name: "read-only task: no effect to verify", workflow: "report", args: `{"duration_ms": 10}`, trigger: "task_terminal", want: operations.OutcomeNoEffect},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, _ := setupMore(t)
			id := w.Start(t, c.workflow, "k-"+c.workflow, c.args).Response.OperationID
			w.Watcher(t, "w1", nil)
			vp := w.verifier(t, 3)
			opstest.WaitFor(t, vp, 20*time.Second, "outcome check done", func() bool { return w.checked(t, id) })
			d := w.Detail(t, id)
			if !c.wantItem {
				if w.hasItem(id) || d.DomainOutcome != c.want || d.Attention != "" {
					t.Fatalf("item %v, outcome %s, attention %q; want no item and %s", w.hasItem(id), d.DomainOutcome, d.Attention, c.want)
				}
				// Listed and filterable.
				page, err := w.Ops.List(context.Background(), operations.Scope{All: true}, operations.Filter{DomainOutcome: c.want})
				if err != nil || len(page.Operations) != 1 || page.Operations[0].ID != id {
					t.Fatalf("list by %s: %+v %v", c.want, page.Operations, err)
				}
				found := false
				for _, e := range d.Timeline {
					found = found || (e.State == "no_effect_to_verify" && strings.Contains(e.Message, "no effect to verify")) ||
						(e.State == "unverified" && strings.Contains(e.Message, "no outcome verifier"))
				}
				if !found {
					t.Fatalf("timeline does not say there is no effect to verify: %+v", d.Timeline)
				}
				return
			}
			it := w.item(t, id)
			if it.Reason != reconcile.ReasonManualVerification || it.State != reconcile.StateNeedsPerson || it.Attempts != 0 {
				t.Fatalf("item %+v: want manual_verification needing a person, no automatic attempts", it)
			}
			if d.DomainOutcome != operations.OutcomeUnknown || d.Attention == "" {
				t.Fatalf("outcome %s attention %q: want unknown, needing reconciliation", d.DomainOutcome, d.Attention)
			}
			if !strings.Contains(reconcile.ReasonText(it.Reason), "a person confirms") || !strings.Contains(it.Detail, "no outcome verifier") {
				t.Fatalf("reason not worded for people: %q / %q", reconcile.ReasonText(it.Reason), it.Detail)
			}
			vs, err := w.rs.Verifications(context.Background(), all, id)
			if err != nil || len(vs) != 1 || vs[0].Source != reconcile.KindNone || vs[0].Trigger != c.trigger {
				t.Fatalf("verifications %+v %v: want one answer from source none on %s", vs, err, c.trigger)
			}
			if w.auditCount(t, "reconcile.open") != 1 {
				t.Fatal("the opening is not audited")
			}
			// A person confirms the outcome; that settles the operation.
			if _, err := w.rs.Claim(context.Background(), support, acme, it.ID, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := w.rs.Resolve(context.Background(), support, acme, it.ID, reconcile.Resolution{Outcome: reconcile.OutcomeApplied,
				Reason: "verified in the system of record", Note: "found", EvidenceURL: "https://ledger.example/1"}); err != nil {
				t.Fatal(err)
			}
			if d := w.Detail(t, id); d.DomainOutcome != operations.OutcomeApplied {
				t.Fatalf("after resolution outcome %s", d.DomainOutcome)
			}
		})
	}
}

// TestJobAPIVerifier asks the reference receiver's fake job API: a succeeded job is applied
// with its receipt, a failed one not_applied, and a status the job API cannot give opens an
// item that is re-verified and then handed to a person.
func TestJobAPIVerifier(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, workflow, args string
		spoil                bool
		want                 operations.Outcome
		wantReason           reconcile.Reason
	}{
		{name: "succeeded is applied", workflow: "payout-v", args: `{"duration_ms": 10}`, want: operations.OutcomeApplied},
		{name: "failed is not applied", workflow: "payout-v", args: `{"duration_ms": 10, "outcome": "failed"}`, want: operations.OutcomeNotApplied},
		{name: "unknown opens an item", workflow: "payout-proxy", args: `{"duration_ms": 10}`, spoil: true,
			want: operations.OutcomeUnknown, wantReason: reconcile.ReasonVerifierUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, proxy := setupMore(t)
			id := w.Start(t, c.workflow, "k-"+c.workflow, c.args).Response.OperationID
			_, wp := w.Watcher(t, "w1", nil)
			opstest.WaitFor(t, wp, 10*time.Second, "job ends", func() bool {
				d := w.Detail(t, id)
				return d.Job != nil && (d.Job.Status == "succeeded" || d.Job.Status == "failed")
			})
			proxy.spoiled.Store(c.spoil)
			vp := w.verifier(t, 2)
			opstest.WaitFor(t, vp, 20*time.Second, "outcome verified", func() bool {
				if c.wantReason != "" {
					return w.hasItem(id) && w.item(t, id).State == reconcile.StateNeedsPerson
				}
				return w.Detail(t, id).DomainOutcome == c.want
			})
			d := w.Detail(t, id)
			verified := 0
			for _, e := range d.Timeline {
				if e.State == "verified" {
					verified++
					if e.Source != operations.SourceVerifier || e.Source == operations.SourceOperator {
						t.Fatalf("verifier line %+v stored with source %q, want %q", e, e.Source, operations.SourceVerifier)
					}
				}
			}
			if c.wantReason == "" && verified == 0 {
				t.Fatalf("no verifier line in the timeline %+v", d.Timeline)
			}
			vs, err := w.rs.Verifications(context.Background(), all, id)
			if err != nil || len(vs) == 0 {
				t.Fatalf("verifications %v %v", vs, err)
			}
			if vs[0].Source != reconcile.KindJobAPI || vs[0].Trigger != "job_answer" {
				t.Fatalf("first answer %+v: want job_api on job_answer", vs[0])
			}
			switch {
			case c.wantReason != "":
				it := w.item(t, id)
				if it.Reason != c.wantReason || d.DomainOutcome != operations.OutcomeUnknown || it.Attempts != 2 || len(vs) != 3 {
					t.Fatalf("item %+v, outcome %s, %d answers: want %s after 2 re-verifications", it, d.DomainOutcome, len(vs), c.wantReason)
				}
				if vs[0].HTTPStatus == nil || *vs[0].HTTPStatus != http.StatusServiceUnavailable || !strings.Contains(vs[0].Detail, "HTTP 503") {
					t.Fatalf("answer %+v: want the job API's 503 recorded", vs[0])
				}
			case c.want == operations.OutcomeApplied:
				if w.hasItem(id) || len(vs) != 1 || vs[0].Answer != reconcile.OutcomeApplied || !strings.HasPrefix(vs[0].Receipt, "rcpt_") {
					t.Fatalf("applied: item %v, answers %+v: want one applied answer with the job's receipt", w.hasItem(id), vs)
				}
			default:
				if w.hasItem(id) || len(vs) != 1 || vs[0].Answer != reconcile.OutcomeNotApplied || !strings.Contains(vs[0].Detail, "failed") {
					t.Fatalf("not applied: item %v, answers %+v", w.hasItem(id), vs)
				}
			}
		})
	}
}

// countingTransport counts verifier lookups per URL path.
type countingTransport struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.n[r.URL.Path]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (c *countingTransport) count(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path]
}

// TestTwoReplicasVerifyEachDueItemOnce: two re-verification replicas on one database share
// the checks and due items; every operation is looked up exactly once per due time (its first
// check plus one per automatic attempt), never twice by both replicas.
func TestTwoReplicasVerifyEachDueItemOnce(t *testing.T) {
	t.Parallel()
	w := setup(t)
	const n, maxAttempts = 12, 3
	var ids []string
	for i := range n {
		ids = append(ids, w.Start(t, "refund-404", fmt.Sprintf("k-rep-%d", i), `{"duration_ms": 10}`).Response.OperationID)
	}
	_, wp := w.Watcher(t, "w1", nil)
	opstest.WaitFor(t, wp, 20*time.Second, "tasks end", func() bool {
		var left int
		if err := w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks WHERE coalesce(result_state, '') NOT IN ('fetched', 'failed')`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	ct := &countingTransport{n: map[string]int{}}
	passes := make(chan int, 1)
	var handled [2]atomic.Int64
	var svcs []*reconcile.Service
	for i, replica := range []string{"r1", "r2"} {
		svc, err := reconcile.New(reconcile.Config{Pool: w.Pool, Policy: w.Policy, Lookup: reconcile.Lookup{Client: &http.Client{Transport: ct}},
			ReplicaID: replica, BatchSize: 2, Interval: 5 * time.Millisecond, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
			MaxAttempts: maxAttempts, AfterPass: func(h int) {
				handled[i].Add(int64(h))
				select {
				case passes <- 1:
				default:
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(svc.Stop)
		svcs = append(svcs, svc)
	}
	opstest.WaitFor(t, passes, 30*time.Second, "every item handed to a person", func() bool {
		var waiting int
		if err := w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM operations o WHERE o.workflow = 'refund-404' AND NOT EXISTS
			(SELECT 1 FROM reconciliation_items r WHERE r.operation_id = o.id AND r.state = 'needs_person')`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting == 0
	})
	// Stop both replicas (each finishes its pass) before counting what they did.
	for _, svc := range svcs {
		svc.Stop()
	}
	for _, id := range ids {
		if got := ct.count("/nowhere/" + id); got != 1+maxAttempts {
			t.Errorf("operation %s looked up %d times, want %d (one check and %d attempts)", id, got, 1+maxAttempts, maxAttempts)
		}
		var answers, attempts int
		if err := w.Pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM outcome_verifications WHERE operation_id = $1),
			(SELECT attempts FROM reconciliation_items WHERE operation_id = $1)`, id).Scan(&answers, &attempts); err != nil {
			t.Fatal(err)
		}
		if answers != 1+maxAttempts || attempts != maxAttempts {
			t.Errorf("operation %s: %d answers, %d attempts", id, answers, attempts)
		}
	}
	if got := handled[0].Load() + handled[1].Load(); got != n*(1+maxAttempts) {
		t.Errorf("replicas handled %d checks and items (r1 %d, r2 %d), want %d", got, handled[0].Load(), handled[1].Load(), n*(1+maxAttempts))
	}
	t.Logf("r1 handled %d, r2 handled %d", handled[0].Load(), handled[1].Load())
}

// TestQueueKeysetPages walks the queue a page at a time: every item in scope exactly once, in
// order, even when items share an opening time; another tenant's items never appear.
func TestQueueKeysetPages(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 11 {
		want[w.handoff(t, "acme", fmt.Sprintf("page-%d", i)).ID] = true
	}
	foreign := w.handoff(t, "globex", "page-g").ID
	// Half the items share one opening time: the public id breaks the tie.
	if _, err := w.Pool.Exec(ctx, `UPDATE reconciliation_items SET opened_at = '2026-01-01T00:00:00Z' WHERE id % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var prev *reconcile.Item
	pages := 0
	f := reconcile.Filter{Limit: 4}
	for {
		p, err := w.rs.List(ctx, acme, f)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(p.Items) > 4 {
			t.Fatalf("page of %d items, limit 4", len(p.Items))
		}
		for _, it := range p.Items {
			if seen[it.ID] {
				t.Fatalf("item %s on two pages", it.ID)
			}
			if it.ID == foreign {
				t.Fatal("another tenant's item in the queue")
			}
			if prev != nil && (it.OpenedAt.Before(prev.OpenedAt) || it.OpenedAt.Equal(prev.OpenedAt) && it.ID < prev.ID) {
				t.Fatalf("item %s after %s: out of order", it.ID, prev.ID)
			}
			seen[it.ID] = true
			prev = &it
		}
		if p.Next == "" {
			break
		}
		f.After = p.Next
	}
	if pages != 3 || len(seen) != len(want) {
		t.Fatalf("%d pages, %d items; want 3 pages and %d items", pages, len(seen), len(want))
	}
	for id := range want {
		if !seen[id] {
			t.Errorf("item %s missing from every page", id)
		}
	}
	if _, err := w.rs.List(ctx, acme, reconcile.Filter{After: "not-a-cursor"}); err == nil {
		t.Fatal("a malformed cursor was accepted")
	}
}
