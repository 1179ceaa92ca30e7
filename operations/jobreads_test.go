package operations_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
)

// jobAPI is a job API on 127.0.0.1. It takes jobs and answers status reads with the status
// and HTTP code it is set to, or holds them until hang is closed or the reader gives up (a job
// API that stopped answering). With a token it refuses any request without it as a bearer.
type jobAPI struct {
	token string
	hang  chan struct{}

	mu                    sync.Mutex
	status                string
	code                  int
	jobs                  int
	reads, inFlight, most int
	unauthorised          int
}

func (a *jobAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	if a.token != "" && r.Header.Get("Authorization") != "Bearer "+a.token {
		a.unauthorised++
		a.mu.Unlock()
		http.Error(w, "unauthorised", http.StatusUnauthorized)
		return
	}
	if r.Method == http.MethodPost {
		a.jobs++
		id := fmt.Sprintf("j-%d", a.jobs)
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id": id, "status": "queued"})
		return
	}
	a.reads++
	a.inFlight++
	a.most = max(a.most, a.inFlight)
	hang := a.hang
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.inFlight--
		a.mu.Unlock()
	}()
	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
			return
		}
	}
	a.mu.Lock()
	status, code := a.status, a.code
	a.mu.Unlock()
	if code != 0 && code != http.StatusOK {
		http.Error(w, "unavailable", code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"id": strings.TrimPrefix(r.URL.Path, "/jobs/"), "status": status})
}

func (a *jobAPI) set(status string, code int) {
	a.mu.Lock()
	a.status, a.code = status, code
	a.mu.Unlock()
}

// counts returns the status reads received, the most in flight at once and the requests
// refused for want of the token.
func (a *jobAPI) counts() (reads, most, unauthorised int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reads, a.most, a.unauthorised
}

func serveJobAPI(t *testing.T, a *jobAPI) string {
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	if a.hang != nil {
		// Runs before srv.Close: the held reads end first.
		t.Cleanup(func() { close(a.hang) })
	}
	return srv.URL
}

// A job API that stops answering holds neither the watcher's pass, which goes on taking Tasks
// in, nor the reads of another job API; it is sent at most maxJobReadsPerAPI (4) reads at once,
// each ends at the workflow's status budget with the reason on the operation's page, and the
// page's count of reads is the reads the job API received.
func TestASilentJobAPIHoldsNeitherThePassNorAnotherJobAPI(t *testing.T) {
	t.Parallel()
	silent := &jobAPI{hang: make(chan struct{}), status: "running"}
	fine := &jobAPI{status: "succeeded"}
	b := opstest.Setup(t, opstest.Options{Extra: `
  - {name: silent, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "` + serveJobAPI(t, silent) + `"},
     owners: [ops], budgets: {status: {timeout: 1s}}}
  - {name: fine, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "` + serveJobAPI(t, fine) + `"}, owners: [ops]}
`})
	var silentOps []string
	for i := range 6 {
		silentOps = append(silentOps, b.Start(t, "silent", fmt.Sprintf("s-%d", i), `{}`).Response.OperationID)
	}
	w, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "the silent job API holding a read", func() bool {
		reads, _, _ := silent.counts()
		return reads >= 1
	})
	// Started while the silent job API holds its reads: a job of another API and a Task.
	fineOp := b.Start(t, "fine", "f-1", `{}`).Response.OperationID
	taskOp := b.Start(t, "refund", "t-1", `{"outcome": "hang"}`).Response.OperationID
	opstest.WaitFor(t, passes, 5*time.Second, "the other job API's job read and the Task watched", func() bool {
		d, task := b.Detail(t, fineOp), b.Detail(t, taskOp)
		return d.Job != nil && d.Job.Status == "succeeded" && task.Task != nil && task.Task.Polls >= 2
	})
	opstest.WaitFor(t, passes, 10*time.Second, "a read that got no answer within the budget, on the page", func() bool {
		d := b.Detail(t, silentOps[0])
		return d.Job != nil && d.Job.Error == "status read failed: no answer within 1s"
	})
	opstest.WaitFor(t, passes, 10*time.Second, "the silent job API's four reads at once", func() bool {
		_, most, _ := silent.counts()
		return most >= 4
	})
	if _, most, _ := silent.counts(); most > 4 {
		t.Errorf("the silent job API had %d reads in flight at once, want at most 4", most)
	}
	// Claimed jobs over the API's bound are handed back unread: the page counts the reads made.
	w.Stop()
	reads, _, _ := silent.counts()
	polls := 0
	for _, id := range silentOps {
		d := b.Detail(t, id)
		if d.Job == nil || d.Job.Status != "queued" {
			t.Fatalf("silent job %s: %+v, want queued", id, d.Job)
		}
		polls += d.Job.Polls
	}
	// A read the stop cut short is not counted, though it may have reached the job API.
	if polls > reads || polls < reads-4 {
		t.Errorf("the silent jobs' pages count %d status reads, the job API received %d (at most 4 cut short by the stop)", polls, reads)
	}
}

// A job API that wants its credential gets it on the submission and on every status read
// (resolved from the environment, as MCP servers' tokens are); a status read it refuses says
// why on the operation's page until a read succeeds; and a credential that cannot be resolved
// sends nothing and refuses the start, naming the variable, never a value.
func TestJobReadsCarryTheCredentialAndSayWhyTheyFail(t *testing.T) {
	t.Parallel()
	const token = "job-api-secret-7f3a"
	api := &jobAPI{token: token, status: "running"}
	url := serveJobAPI(t, api)
	b := opstest.Setup(t, opstest.Options{Env: map[string]string{"JOB_TOKEN": token}, Extra: `
  - {name: guarded, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "` + url + `", credential: {env: JOB_TOKEN}},
     owners: [ops]}
  - {name: unset, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "` + url + `", credential: {env: JOB_TOKEN_UNSET}},
     owners: [ops]}
`})
	id := b.Start(t, "guarded", "g-1", `{}`).Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "the job read as running", func() bool {
		d := b.Detail(t, id)
		return d.Job != nil && d.Job.Status == "running"
	})
	api.set("running", http.StatusServiceUnavailable)
	opstest.WaitFor(t, passes, 10*time.Second, "the refused read on the page", func() bool {
		d := b.Detail(t, id)
		return d.Job != nil && d.Job.Error == "status read failed: HTTP 503"
	})
	api.set("succeeded", http.StatusOK)
	opstest.WaitFor(t, passes, 10*time.Second, "the job succeeded", func() bool {
		d := b.Detail(t, id)
		return d.Job != nil && d.Job.Status == "succeeded" && d.Job.Error == ""
	})
	if _, _, refused := api.counts(); refused != 0 {
		t.Errorf("%d requests reached the job API without its credential", refused)
	}

	before := api.jobCount()
	res := b.Start(t, "unset", "u-1", `{}`)
	d := b.Detail(t, res.Response.OperationID)
	if d.DomainOutcome != operations.OutcomeNotRun || d.Job == nil || d.Job.Status != "refused" ||
		!strings.Contains(d.Job.Error, "JOB_TOKEN_UNSET is not set") {
		t.Errorf("a start whose job API credential is missing: outcome %s, job %+v", d.DomainOutcome, d.Job)
	}
	if api.jobCount() != before {
		t.Error("a job was submitted without its credential")
	}
	page, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(page), token) {
		t.Error("the credential's value is on the operation's page")
	}
}

func (a *jobAPI) jobCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.jobs
}
