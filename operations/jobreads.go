package operations

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/inflight"
)

// Job status reads run beside the watchers' passes, never in them: a job API that stops
// answering holds a few reads until their timeout, not the pass that takes new tasks in, and
// not the reads of other job APIs.
const (
	// maxJobReads bounds the job status reads in flight in one console process; a pass claims
	// no more jobs than there are reads free.
	maxJobReads = 16
	// maxJobReadsPerAPI bounds those of them to one job API. A claimed job of an API already
	// at its bound is handed back unread and read after its interval.
	maxJobReadsPerAPI = 4
	// defaultJobReadTimeout bounds a status read of a workflow with no status budget.
	defaultJobReadTimeout = 10 * time.Second
)

// jobReads counts the job status reads this process has claimed or has in flight, and the
// operations whose jobs they are.
type jobReads struct {
	bound inflight.Bound
	mu    sync.Mutex
	ops   map[string]bool
}

func newJobReads() *jobReads {
	return &jobReads{bound: inflight.Bound{Total: maxJobReads, PerKey: maxJobReadsPerAPI}, ops: map[string]bool{}}
}

// reserve takes up to n reads for a claim and returns how many it took, and the operations
// whose jobs are claimed or in flight already (the claim leaves them out: a job is never read
// twice at once).
func (r *jobReads) reserve(n int) (int, []string) {
	k := r.bound.Reserve(n)
	r.mu.Lock()
	defer r.mu.Unlock()
	busy := make([]string, 0, len(r.ops))
	for op := range r.ops {
		busy = append(busy, op)
	}
	return k, busy
}

// took records the jobs a claim of reserved reads took and gives back the reads it did not use.
func (r *jobReads) took(jobs []dueJob, reserved int) {
	r.bound.Release(reserved - len(jobs))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range jobs {
		r.ops[d.op] = true
	}
}

// admit starts the read of a claimed job, unless its job API has maxJobReadsPerAPI in flight.
func (r *jobReads) admit(d dueJob) bool { return r.bound.Enter(d.base) }

// done ends a claimed job's read (admitted says admit started it) and frees its place.
func (r *jobReads) done(d dueJob, admitted bool) {
	if admitted {
		r.bound.Leave(d.base)
	}
	r.mu.Lock()
	delete(r.ops, d.op)
	r.mu.Unlock()
	r.bound.Release(1)
}

// DueJobs are the jobs a watcher pass claimed (TakeDue). Each holds one of the process's job
// reads until ReadJobs has read it; a caller that drops them without ReadJobs leaks the reads.
type DueJobs struct {
	list    []dueJob
	replica string
}

// Len returns how many jobs were claimed.
func (d DueJobs) Len() int { return len(d.list) }

// ReadJobs asks each job API about its claimed jobs once, all at once within the bounds
// (maxJobReadsPerAPI), each read within its workflow's status budget and with the workflow's
// job API credential, and records what they answer. It returns when every read ended; ctx
// ending stops them, and a read that ctx stopped records nothing (the job is read again after
// its lease). A job over its API's bound is handed back unread.
func (s *Service) ReadJobs(ctx context.Context, jobs DueJobs) {
	var wg sync.WaitGroup
	var unread []dueJob
	for _, d := range jobs.list {
		if !s.reads.admit(d) {
			unread = append(unread, d)
			continue
		}
		wg.Go(func() {
			defer s.reads.done(d, true)
			s.readJob(ctx, d, jobs.replica)
		})
	}
	if len(unread) > 0 {
		// Handed back before they leave the reads: no claim takes them meanwhile.
		s.handBack(ctx, unread, jobs.replica)
		for _, d := range unread {
			s.reads.done(d, false)
		}
	}
	wg.Wait()
}

// handBack gives claimed jobs back unread: the claim's count of reads is taken back and the
// lease let go, also when ctx ended meanwhile, so that the page counts only reads made; the
// next read is due at the interval the claim set.
func (s *Service) handBack(ctx context.Context, jobs []dueJob, replica string) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ops := make([]string, len(jobs))
	for i, d := range jobs {
		ops[i] = d.op
	}
	if _, err := s.cfg.Store.pool.Exec(hctx, `UPDATE job_runs SET polls = greatest(polls - 1, 0), lease_owner = NULL, lease_expires_at = NULL
		WHERE operation_id = ANY($1::text[]::uuid[]) AND lease_owner = $2`, ops, replica); err != nil {
		s.cfg.Logger.Error("hand back unread jobs", "jobs", len(ops), "err", err)
	}
}

// readJob reads one job's status and records it: its new status, the job API's loss of it
// (404), or why the read failed, which the operation's page shows until a read succeeds. A
// read that failed because ctx ended (the console stopping) is handed back, not recorded.
func (s *Service) readJob(ctx context.Context, d dueJob, replica string) {
	wf, _ := s.cfg.Policy.Workflow(d.workflow)
	timeout := defaultJobReadTimeout
	if wf != nil && wf.Budgets.Status.Timeout.Duration > 0 {
		timeout = wf.Budgets.Status.Timeout.Duration
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	j, status, err := s.getJob(rctx, wf, d)
	if err != nil && ctx.Err() != nil {
		s.handBack(ctx, []dueJob{d}, replica)
		return
	}
	// What was read is recorded even if ctx ends now: the watcher waits for its reads.
	ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case err != nil:
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", timeout)
		}
		s.jobReadFailed(ctx, d.op, "status read failed: "+safeMessage(err))
	case status == http.StatusNotFound:
		// The job API no longer knows the job (it lost its state): the effect may or may not
		// have happened, so the outcome is unknown and a person is asked; never resent.
		s.jobLost(ctx, d.op, d.job)
	case status != http.StatusOK:
		s.jobReadFailed(ctx, d.op, fmt.Sprintf("status read failed: HTTP %d", status))
	case !j.usable():
		// An unusable answer is never stored; the job is read again after the interval.
		s.jobReadFailed(ctx, d.op, "status read answered an unusable job")
	default:
		if err := s.cfg.Store.UpdateJob(ctx, d.op, j, s.cfg.Now().Add(s.cfg.DefaultPoll), SourcePoll); err != nil {
			s.cfg.Logger.Error("record job status", "operation", d.op, "err", err)
		}
	}
}

// getJob sends the status read of job d and returns the answer's status code and decoded job
// (its id is the job asked about, whatever id the answer names).
func (s *Service) getJob(ctx context.Context, wf *config.Workflow, d dueJob) (jobAnswer, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(d.base, "/")+"/jobs/"+url.PathEscape(d.job), nil)
	if err != nil {
		return jobAnswer{}, 0, err
	}
	if err := s.jobAuth(req, wf); err != nil {
		return jobAnswer{}, 0, err
	}
	resp, err := s.cfg.JobClient.Do(req)
	if err != nil {
		return jobAnswer{}, 0, err
	}
	defer resp.Body.Close()
	var j jobAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&j); err != nil {
			j = jobAnswer{}
		}
	}
	j.ID = d.job
	return j, resp.StatusCode, nil
}

// jobAuth sets the workflow's job API credential on req, resolved as the MCP servers' tokens
// are (ServersConfig.Getenv). The value is never logged; an error names the secret, not it.
func (s *Service) jobAuth(req *http.Request, wf *config.Workflow) error {
	if wf == nil || wf.Fallback.Credential == nil {
		return nil
	}
	tok, err := wf.Fallback.Credential.Resolve(s.cfg.Servers.cfg.Getenv)
	if err != nil {
		return fmt.Errorf("job API credential: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return nil
}

// jobReadFailed records why a job's status read failed, for the operation's page; the job is
// read again after its interval. A later read's answer replaces it.
func (s *Service) jobReadFailed(ctx context.Context, opID, msg string) {
	if _, err := s.cfg.Store.pool.Exec(ctx, `UPDATE job_runs SET error = $2, updated_at = now()
		WHERE operation_id = $1 AND status IN ('queued', 'running')`, opID, sanitize(msg, 300)); err != nil {
		s.cfg.Logger.Error("record failed job status read", "operation", opID, "err", err)
	}
}
