package watch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// A 2025-11-25 question arrives as an elicitation/create request on the tasks/result stream
// and is held there, unanswered, for as long as the workflow's input wait allows (bounded by
// the task's deadline): the answer a person gives minutes or hours later is that request's
// response. The replica holding it is recorded with the question. After a restart, or on
// another replica, tasks/result is opened again and the server delivers its queued request
// again under the same key.

// inputWait is how long a question of a task with deadline is held: the workflow's input wait,
// bounded by the deadline (until the deadline when the workflow sets none).
func inputWait(wf *config.Workflow, deadline *time.Time, now time.Time) time.Duration {
	wait := wf.InputWait.Duration
	if deadline != nil {
		if left := deadline.Sub(now); wait <= 0 || left < wait {
			wait = left
		}
	}
	return wait
}

// storeInput records a question the server asked on this replica's connection, held here
// until its expiry.
func (s *Service) storeInput(ctx context.Context, op operations.Operation, r mcpclient.InputRequest) error {
	expires := op.Task.Deadline
	if !r.ExpiresAt.IsZero() {
		e := r.ExpiresAt
		expires = &e
	}
	if _, err := s.store.UpsertInputs(ctx, op.ID, operations.InputsFrom([]mcpclient.InputRequest{r}, expires)); err != nil {
		return err
	}
	if op.Task.Era != string(mcpclient.EraLegacy) {
		return nil
	}
	return s.store.HoldInput(ctx, op.ID, r.Key, s.cfg.ReplicaID, expires)
}

// reopen opens a fresh tasks/result wait here for the operation's 2025-11-25 task, so the
// server delivers its queued questions on it: a wait already running here was opened while
// the question was held on another connection, and a server re-sends a question only on a
// stream opened after it saw the old one close.
func (s *Service) reopen(ctx context.Context, opID string) error {
	op, err := s.store.Get(ctx, opID)
	if err != nil {
		return err
	}
	if op.Task == nil || op.Task.Era != string(mcpclient.EraLegacy) {
		return fmt.Errorf("operation %s has no 2025-11-25 task", opID)
	}
	conn, err := s.cfg.Servers.TaskConn(ctx, op.Task.Server, op.Task)
	if err != nil {
		return err
	}
	s.mu.Lock()
	running := s.bg != nil && s.cancel != nil
	s.mu.Unlock()
	if !running {
		return errors.New("the watcher of this console is not running")
	}
	conn.Seed(op.Task.TaskID, mcpclient.Status(op.Task.State)) // its questions name a task the connection knows
	s.awaitLegacy(operations.Due{Operation: op, DueAt: time.Now()}, conn, s.workflow(op.Workflow), true)
	return nil
}
