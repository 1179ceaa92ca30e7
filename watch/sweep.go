package watch

import (
	"context"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// maxSweepPages bounds one sweep; members the sweep did not reach are read with tasks/get.
const maxSweepPages = 10_000

// sweep observes the members of a group whose next poll has come (or comes within half an
// interval: see align) with one paged tasks/list sweep of their connection (2025-11-25, tasks.list declared): one request per page instead of
// a tasks/get per task, each listed task observed as a tasks/get answer would be (checked
// against the state machine, written only on change). A due member the sweep did not list is
// read with tasks/get at once, and from then on. The next sweep comes one interval (plus
// jitter) after this one began, so no member is observed more often than its interval.
func (s *Service) sweep(ctx context.Context, g *group) {
	h := &s.hold
	start := time.Now()
	item := g.item
	// A quarter of a poll's jitter: one sweep per connection has no herd of polls to spread.
	next := start.Add(g.interval + s.jitter(g.interval)/4)
	item.next = next
	// A member whose next poll comes within half an interval is observed now rather than a
	// whole interval late: a task joining the group is aligned with its sweeps once, observed
	// at most half an interval early, as its connection is listed once per interval anyway.
	align := start.Add(g.interval / 2)
	h.mu.Lock()
	due := make(map[string]*entry, len(g.members))
	var first *entry
	earliest := time.Time{}
	for id, m := range g.members {
		if !m.due.After(align) && !m.reading {
			due[id] = m
			first = m
		} else if earliest.IsZero() || m.due.Before(earliest) {
			earliest = m.due
		}
	}
	h.mu.Unlock()
	if len(due) == 0 {
		if !earliest.IsZero() {
			item.next = earliest.Add(-g.interval / 2)
		}
		return
	}
	fallback := func(at time.Time) {
		h.mu.Lock()
		for _, m := range due {
			if m.group == g && !m.reading {
				h.schedule(m, at)
			}
		}
		h.mu.Unlock()
		h.poke()
	}
	conn, err := s.cfg.Servers.TaskConn(ctx, g.server, first.d.Task)
	if err != nil {
		fallback(start) // each is read, and fails, on its own
		return
	}
	wf := s.workflow(first.d.Workflow)
	cursor := ""
	for range maxSweepPages {
		page, err := withRetries(ctx, wf.Budgets.Status, func(ctx context.Context) (mcpclient.ListedPage, error) {
			return mcpclient.ListObserve(ctx, conn, cursor)
		})
		var seen []*entry
		var snaps []mcpclient.Snapshot
		for _, sn := range page.Snapshots {
			if m := due[sn.Task.ID]; m != nil {
				delete(due, sn.Task.ID)
				seen = append(seen, m)
				snaps = append(snaps, sn)
			}
		}
		s.counted(g.server, pollResult(err), seen...)
		if err != nil {
			if until, ok := mcpclient.RetryAt(err); ok {
				item.next = until
				fallback(until)
				return
			}
			s.log.Info("tasks/list sweep failed; its tasks are read with tasks/get", "server", g.server, "err", err)
			fallback(time.Now())
			return
		}
		for i, m := range seen {
			s.observeListed(ctx, g, m, conn, snaps[i], next)
		}
		if page.NextCursor == "" || len(due) == 0 {
			break
		}
		cursor = page.NextCursor
	}
	// Due members the list did not show (another session's, or the sweep's page bound).
	h.mu.Lock()
	for _, m := range due {
		if m.group == g && !m.reading {
			m.unlisted = true
			h.schedule(m, time.Now())
		}
	}
	h.mu.Unlock()
	h.poke()
}

// observeListed applies a listed status to member m as a tasks/get answer would be applied;
// m stays in the group, due at the next sweep, unless the observation moved it.
func (s *Service) observeListed(ctx context.Context, g *group, m *entry, conn mcpclient.Conn, snap mcpclient.Snapshot, next time.Time) {
	h := &s.hold
	h.mu.Lock()
	if m.group != g || m.reading || h.tasks[m.d.ID] != m {
		h.mu.Unlock()
		return
	}
	h.leaveGroup(m)
	m.reading = true
	h.mu.Unlock()
	s.metrics.lateness.Observe(max(0, time.Since(m.due).Seconds()))
	m.next, m.drop = next, false
	s.observed(ctx, m, conn, s.workflow(m.d.Workflow), snap)
	h.mu.Lock()
	n := h.settle(s, m)
	h.mu.Unlock()
	s.persistPolls(m.d.ID, n)
}

// jitter is the random part added to an interval: up to Jitter of it, at most MaxJitter.
func (s *Service) jitter(iv time.Duration) time.Duration {
	j := min(time.Duration(s.cfg.Jitter*float64(iv)), s.cfg.MaxJitter)
	if j <= 0 {
		return 0
	}
	return time.Duration(randFloat() * float64(j))
}
