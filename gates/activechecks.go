package gates

import (
	"context"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// outlivesWait is how long the outlives-request case watches the slow call.
const outlivesWait = 500 * time.Millisecond

// outlivesRequest creates the slow call and watches it for a moment without cancelling it: a
// task outlives the request that created it. A task that ends cancelled unasked is the
// deviation of servers that run the task's work under the creating request's context, so it
// stops when that request's answer has been sent.
func (s *session) outlivesRequest(ctx context.Context) {
	c := s.begin(SuiteContract, "outlives-request")
	if why := s.allowed(s.t.Slow, "slow"); why != "" || !s.tasksOffered() {
		if why == "" {
			why = "the server offers no task-augmented tools/call"
		}
		s.end(c, Inconclusive, why)
		return
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	task, err := s.create(cctx, s.conn, s.t.Slow, s.key(), 0)
	if err != nil {
		s.end(c, Fail, "create: "+err.Error())
		return
	}
	t0 := time.Now()
	f, err := s.follow(cctx, s.conn, task.ID, func(mcpclient.Snapshot) bool { return time.Since(t0) >= outlivesWait })
	c.note("statuses %s in the %s after the create", statusList(f.statuses), outlivesWait)
	if !f.last.Task.Status.Terminal() {
		_, _ = s.conn.CancelTask(cctx, task.ID)
	}
	switch {
	case err != nil:
		s.end(c, Inconclusive, "following the task: "+err.Error())
	case f.last.Task.Status == mcpclient.StatusCancelled:
		s.run.Deviations.set(DevCancelOnRequestEnd, "cancelled without a cancel request", "neither", true)
		s.end(c, Fail, "the task was cancelled without a cancel request once its creating request had ended")
	default:
		if s.run.Deviations[DevCancelOnRequestEnd].Observed == NotObserved {
			s.run.Deviations.set(DevCancelOnRequestEnd, "no", "", false)
		}
		s.end(c, Pass, "the task outlived its creating request ("+string(f.last.Task.Status)+" after "+outlivesWait.String()+")")
	}
}

// dropWait is how long an accepted answer may leave the task asking the same question.
const dropWait = 2 * time.Second

// answerDropped reports whether a snapshot taken after the answer to key still asks it.
func answerDropped(sn mcpclient.Snapshot, key string) bool {
	if sn.Task.Status != mcpclient.StatusInputRequired {
		return false
	}
	for _, r := range sn.InputRequests {
		if r.Key == key {
			return true
		}
	}
	return len(sn.InputRequests) == 0 // still input_required and nothing new asked
}
