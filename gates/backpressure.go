package gates

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/mcpclient"
)

// throttleFor is the Retry-After the backpressure case has the proxy ask for.
const throttleFor = time.Second

// backpressure has the proxy answer a status read HTTP 429 with Retry-After: 1 and checks that
// Taskgate's client reports it as backpressure, sends nothing to the server before the wait
// has passed, and then follows the task to its end. 429 answers the server gave of its own
// during the load case (since mark) are noted.
func (s *session) backpressure(ctx context.Context, mark int) {
	c := s.begin(SuiteLoad, "backpressure")
	own := 0
	for _, m := range s.proxy.Messages()[mark:] {
		if m.Dir == "response" && m.Fault == "" && (m.HTTPStatus == http.StatusTooManyRequests || m.HTTPStatus == http.StatusServiceUnavailable) {
			own++
		}
	}
	if own > 0 {
		c.note("the server answered %d requests 429 or 503 of its own in the load case", own)
	}
	if why := s.allowed(s.quick, "quick"); why != "" || !s.tasksOffered() {
		if why == "" {
			why = "the server offers no task-augmented tools/call"
		}
		s.end(c, Inconclusive, why)
		return
	}
	cctx, cancel := s.ctx(ctx)
	defer cancel()
	defer s.proxy.Clear()
	task, err := s.create(cctx, s.conn, s.quick, s.key(), 0)
	if err != nil {
		s.end(c, Fail, "create: "+err.Error())
		return
	}
	s.proxy.Add(faultproxy.Rule{Action: faultproxy.Throttle, Method: "tasks/get", Delay: throttleFor})
	_, err = s.conn.GetTask(cctx, task.ID)
	until, ok := mcpclient.RetryAt(err)
	if !ok {
		s.end(c, Fail, fmt.Sprintf("a 429 with Retry-After was not reported as backpressure: %v", err))
		return
	}
	c.note("429 reported as backpressure until %s", until.UTC().Format(time.RFC3339Nano))
	before := s.proxy.Count("request", "tasks/get")
	short, scancel := context.WithTimeout(cctx, 100*time.Millisecond)
	_, err = s.conn.GetTask(short, task.ID)
	scancel()
	if time.Now().Before(until) && (!errors.Is(err, mcpclient.ErrNotDelivered) || s.proxy.Count("request", "tasks/get") != before) {
		s.end(c, Fail, fmt.Sprintf("a status read inside the Retry-After was sent (%v)", err))
		return
	}
	f, err := s.follow(cctx, s.conn, task.ID, nil)
	if err != nil {
		s.end(c, Fail, "following the task after the wait: "+err.Error())
		return
	}
	var throttled, next time.Time
	for _, m := range s.proxy.Messages()[c.mark:] {
		switch {
		case m.Fault == faultproxy.Throttle:
			throttled = m.At
		case !throttled.IsZero() && next.IsZero() && m.Dir == "request" && m.Method == "tasks/get":
			next = m.At
		}
	}
	if throttled.IsZero() {
		s.end(c, Inconclusive, "the throttle was never reached")
		return
	}
	if next.IsZero() || next.Sub(throttled) < throttleFor {
		s.end(c, Fail, fmt.Sprintf("the next status read came %s after a 429 asking for %s", next.Sub(throttled), throttleFor))
		return
	}
	c.time("next_read_after_429", next.Sub(throttled))
	s.end(c, Pass, fmt.Sprintf("no request inside the Retry-After; the next read came %s after the 429 and the task was followed to %s",
		next.Sub(throttled).Round(time.Millisecond), f.last.Task.Status))
}
