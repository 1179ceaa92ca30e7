package operations_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// hostileJobAPI takes jobs and answers with the id and status it is given; it records the
// request URIs of its status reads.
type hostileJobAPI struct {
	id, status, receipt string
	mu                  sync.Mutex
	reads               []string
}

func (h *hostileJobAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		h.mu.Lock()
		h.reads = append(h.reads, r.RequestURI)
		h.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"id": h.id, "status": h.status, "receipt_id": h.receipt})
}

func (h *hostileJobAPI) uris() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.reads...)
}

func TestHostileJobAPIAnswersAreBoundedAndEscaped(t *testing.T) {
	t.Parallel()
	// A job id that climbs out of /jobs/ and adds a query: status reads stay under /jobs/.
	climb := &hostileJobAPI{id: "../admin/delete?all=1", status: "running"}
	srv := httptest.NewServer(climb)
	t.Cleanup(srv.Close)
	// A status nobody knows, with markup and a huge receipt: nothing of it is kept.
	weird := &hostileJobAPI{id: "j-1", status: "running<script>" + strings.Repeat("x", 5000), receipt: strings.Repeat("r", 100_000)}
	srv2 := httptest.NewServer(weird)
	t.Cleanup(srv2.Close)
	b := opstest.Setup(t, opstest.Options{Extra: `
  - {name: climb, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "` + srv.URL + `"}, owners: [ops]}
  - {name: weird, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "` + srv2.URL + `"}, owners: [ops]}
`})
	climbOp := b.Start(t, "climb", "h-1", `{}`).Response.OperationID
	weirdOp := b.Start(t, "weird", "h-2", `{}`).Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "two status reads", func() bool { return len(climb.uris()) >= 2 })
	for _, u := range climb.uris() {
		if !strings.HasPrefix(u, "/jobs/") || strings.Contains(u, "?") || strings.Contains(u, "/admin/") {
			t.Errorf("status read of %q left /jobs/{id}", u)
		}
	}
	d := b.Detail(t, weirdOp)
	if d.DomainOutcome != operations.OutcomeUnknown {
		t.Errorf("unusable answer to a job submission: outcome %s, want unknown (the job may exist)", d.DomainOutcome)
	}
	if d.Job == nil || strings.Contains(d.Job.Status, "script") || len(d.Job.ReceiptID) > 200 {
		t.Errorf("unusable job answer kept: %+v", d.Job)
	}
	for _, e := range d.Timeline {
		if strings.Contains(e.State, "script") || strings.Contains(e.Message, "script") {
			t.Errorf("timeline keeps the job API's status: %+v", e)
		}
	}
	_ = climbOp
}

// A job API that took a job and then answers 404 for it (it lost its state, as the reference
// receiver does when restarted) leaves the operation unknown with an item, and the job is no
// longer read or submitted again.
func TestJobTheJobAPIForgetsIsUnknownWithAnItem(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var posts, reads int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodPost {
			posts++
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]string{"id": "j-forgotten", "status": "queued"})
			return
		}
		reads++
		http.Error(w, `{"error":"unknown job"}`, http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	b := opstest.Setup(t, opstest.Options{Extra: `
  - {name: forgetful, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "` + srv.URL + `"}, owners: [ops]}
`})
	id := b.Start(t, "forgetful", "f-1", `{}`).Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "the outcome unknown", func() bool { return b.Detail(t, id).DomainOutcome == operations.OutcomeUnknown })
	d := b.Detail(t, id)
	if d.Reconciliation == nil || d.Reconciliation.Reason == "" {
		t.Fatalf("no reconciliation item with a reason: %+v", d.Reconciliation)
	}
	mu.Lock()
	seen := reads
	mu.Unlock()
	for range 10 {
		<-passes
	}
	mu.Lock()
	defer mu.Unlock()
	if reads != seen || posts != 1 {
		t.Errorf("after the 404: %d more reads, %d submissions", reads-seen, posts)
	}
}
