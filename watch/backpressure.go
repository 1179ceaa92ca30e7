package watch

import (
	"context"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// backOff handles a read the server refused with backpressure (HTTP 429, or 503 with
// Retry-After): the task's next poll is moved to when the server lets requests go again, so
// no replica polls it sooner, and the refusal does not count towards the task becoming
// unobservable (the server answered; its deadline still bounds the watching). It reports
// whether err was backpressure.
func (s *Service) backOff(ctx context.Context, d operations.Due, err error) bool {
	until, ok := mcpclient.RetryAt(err)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	at := until
	if err := s.store.Reschedule(ctx, d.ID, at); err != nil {
		s.log.Error("reschedule after backpressure", "operation", d.ID, "err", err)
		return true
	}
	s.log.Info("server asked to retry later", "operation", d.ID, "task", d.Task.TaskID, "server", d.Task.Server, "retry_at", at)
	return true
}
