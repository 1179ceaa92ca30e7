package gates

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/mcpclient"
)

// tamperedRelated has the proxy make the related-task _meta of a tasks/result answer, then of
// an elicitation, name another task, and checks Taskgate takes neither: the result is refused
// as the task's outcome and the question is not filed under the other task (2025-11-25; the
// extension has no related-task _meta).
func (s *session) tamperedRelated(ctx context.Context) {
	names := []string{"tampered-related-task-result", "tampered-related-task-input"}
	if !s.legacy() {
		for _, n := range names {
			s.end(s.begin(SuiteSecurity, n), Inconclusive, "the 2026-07-28 extension has no related-task _meta")
		}
		return
	}
	if !s.tasksOffered() {
		for _, n := range names {
			s.end(s.begin(SuiteSecurity, n), Inconclusive, "the server offers no task-augmented tools/call")
		}
		return
	}
	defer s.proxy.Clear()
	c := s.begin(SuiteSecurity, names[0])
	c.c.Hard = HardCrossIdentity
	if why := s.allowed(s.quick, "quick"); why != "" {
		s.end(c, Inconclusive, why)
	} else {
		s.tamperedResult(ctx, c)
	}
	s.proxy.Clear()
	c = s.begin(SuiteSecurity, names[1])
	c.c.Hard = HardCrossIdentity
	if why := s.allowed(s.t.Input, "input"); why != "" {
		s.end(c, Inconclusive, why)
	} else {
		s.tamperedInput(ctx, c)
	}
}

func (s *session) tamperedResult(ctx context.Context, c *caseRec) {
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	task, err := s.create(cctx, s.conn, s.quick, s.key(), 0)
	if err != nil {
		s.end(c, Inconclusive, "create: "+err.Error())
		return
	}
	if _, err := s.follow(cctx, s.conn, task.ID, nil); err != nil {
		s.end(c, Inconclusive, "following the task: "+err.Error())
		return
	}
	other := mutate(task.ID)
	rule := s.proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "tasks/result", Rewrite: faultproxy.SetRelatedTask(other)})
	out, err := s.conn.AwaitOutcome(cctx, task.ID)
	var rte *mcpclient.RelatedTaskError
	switch {
	case s.proxy.Fired(rule) == 0:
		s.end(c, Inconclusive, "the tasks/result answer was never rewritten")
	case errors.As(err, &rte):
		s.end(c, Pass, "a result whose related-task _meta names another task is refused as the task's outcome")
	case err == nil:
		s.end(c, Fail, "a result whose related-task _meta names task "+inert(other, 80)+" was taken as the outcome ("+out.Describe()+")")
	default:
		s.end(c, Fail, "the tampered result failed without being recognised: "+err.Error())
	}
}

func (s *session) tamperedInput(ctx context.Context, c *caseRec) {
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	task, err := s.create(cctx, s.conn, s.t.Input, s.key(), 0)
	if err != nil {
		s.end(c, Inconclusive, "create: "+err.Error())
		return
	}
	defer func() { _, _ = s.conn.CancelTask(context.WithoutCancel(cctx), task.ID) }()
	f, err := s.follow(cctx, s.conn, task.ID, func(sn mcpclient.Snapshot) bool { return sn.Task.Status == mcpclient.StatusInputRequired })
	if err != nil || f.last.Task.Status != mcpclient.StatusInputRequired {
		s.end(c, Inconclusive, "the task never asked for input (statuses "+statusList(f.statuses)+")")
		return
	}
	other := s.prefix + "-not-a-task-of-ours"
	rule := s.proxy.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Method: "elicitation/create", Rewrite: faultproxy.SetRelatedTask(other)})
	wait, wcancel := context.WithTimeout(cctx, 4*time.Second)
	defer wcancel()
	done := make(chan struct{})
	go func() { defer close(done); _, _ = s.conn.AwaitOutcome(wait, task.ID) }() // the question arrives on the tasks/result stream
	for s.proxy.Fired(rule) == 0 && wait.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if s.proxy.Fired(rule) == 0 {
		s.end(c, Inconclusive, "no elicitation arrived to tamper with")
		return
	}
	select {
	case <-s.inputs.wait(other):
		s.end(c, Fail, "an elicitation naming a task this connection never created was taken as that task's question")
	case <-s.inputs.wait(task.ID):
		s.end(c, Fail, "an elicitation naming another task was filed under this one")
	case <-done:
		s.end(c, Pass, "an elicitation naming a task this connection does not know is refused (the server's wait for an answer ended)")
	case <-wait.Done():
		s.end(c, Pass, "an elicitation naming a task this connection does not know is refused")
	}
}

// cursorReplay gives another identity the nextCursor of our own tasks/list: the server must
// refuse it or list none of our tasks with it (a cursor is not a key to another identity's
// pages).
func (s *session) cursorReplay(ctx context.Context, other mcpclient.Conn) {
	c := s.begin(SuiteSecurity, "cross-identity-list-cursor")
	c.c.Hard = HardCrossIdentity
	if s.listCursor == "" {
		if _, _, err := s.findInList(ctx, s.conn, s.prefix+"-list-to-the-end"); err != nil || s.listCursor == "" {
			s.end(c, Inconclusive, "our own tasks/list fits on one page: there is no cursor to replay")
			return
		}
	}
	page, err := other.ListTasks(ctx, s.listCursor)
	if err != nil {
		s.end(c, Pass, "another identity's tasks/list with our cursor is refused: "+err.Error())
		return
	}
	s.mu.Lock()
	leaked := 0
	for _, t := range page.Tasks {
		if s.listed[t.ID] {
			leaked++
		}
	}
	s.mu.Unlock()
	c.note("%d tasks listed to the other identity with our cursor", len(page.Tasks))
	if leaked > 0 {
		s.end(c, Fail, fmt.Sprintf("with our cursor another identity was listed %d of our tasks", leaked))
		return
	}
	s.end(c, Pass, "our cursor lists none of our tasks to another identity")
}
