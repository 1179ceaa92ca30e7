package watch

import (
	"context"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// backOff handles a read the server refused with backpressure (HTTP 429, or 503 with
// Retry-After): the task's next poll is moved to when the server lets requests go again, so
// no replica polls it sooner (the next flush persists it, however recently the task's progress
// was written), and the refusal does not count towards the task becoming unobservable (the
// server answered; its deadline still bounds the watching). It reports whether err was
// backpressure.
func (s *Service) backOff(ctx context.Context, e *entry, err error) bool {
	until, ok := mcpclient.RetryAt(err)
	if !ok {
		return false
	}
	e.next, e.retry = until, true
	s.log.Info("server asked to retry later", "operation", e.d.ID, "task", e.d.Task.TaskID, "server", e.d.Task.Server, "retry_at", until)
	return true
}

// backOffID is backOff for a read outside a held task's poll (an outcome fetch): the task's
// next poll moves to the server's retry time in the hold, or in the database.
func (s *Service) backOffID(ctx context.Context, opID string, err error) bool {
	until, ok := mcpclient.RetryAt(err)
	if !ok {
		return false
	}
	if s.hold.delay(opID, until) {
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.store.Reschedule(ctx, opID, until); err != nil {
		s.log.Error("reschedule after backpressure", "operation", opID, "err", err)
	}
	return true
}
