package watch

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// entry is one task this replica holds.
type entry struct {
	d operations.Due // the task as this replica last knew it
	// due is the next poll; idx its place in the heap (-1 while reading or dropped).
	due time.Time
	idx int
	// reading is true from the moment the task fell due until its read ended: the reader
	// owns d, next and drop then.
	reading bool
	// next is the next poll the read decided; drop ends the hold after the read.
	next time.Time
	drop bool
	// poke asks for a poll as soon as the running read ends (a poke came meanwhile); refresh
	// asks the next read to read the task's row again first (another writer changed it).
	poke    bool
	refresh bool
	// polls are status reads not yet added to the stored count; moved marks a next poll not
	// yet persisted; wroteAt is when the flush last wrote them (zero: not since it was taken).
	// retry marks a next poll the server set (Retry-After): the next flush writes it whatever
	// ProgressEvery says, so a replica taking the task over does not poll before it.
	polls   int
	moved   bool
	retry   bool
	wroteAt time.Time
	// since is when this replica took the task (for the in-flight amplification).
	since time.Time
	// listKey names the connection whose tasks/list sweeps can observe the task (set by a
	// read on a connection whose server declared tasks.list; "" = read with tasks/get), and
	// group the sweep group the task rides in (nil: scheduled on its own). unlisted is set
	// once a sweep did not list the task: it is read with tasks/get from then on.
	listKey  string
	group    *group
	unlisted bool
	// sweep is set on a group's own heap item: its read is the group's sweep.
	sweep *group
	// notify is set while the task's connection (conn) delivers status notifications: the
	// task is polled at the safety-net interval then.
	notify bool
	conn   mcpclient.Conn
}

// group is the held tasks one tasks/list sweep observes: those of one connection (server and
// session) with the same poll interval. Its sweep runs at most once per interval; a member is
// observed by a sweep only once its own next poll has come.
type group struct {
	key      string
	server   string
	interval time.Duration
	members  map[string]*entry // by task id
	item     *entry            // the group's heap item
	// cursors are the cursors the last sweep read its pages with ("" for the first page): the
	// next sweep starts its segments from them. readAt[i] is when the last sweep asked for page
	// i, span how long that sweep spread over: when span is pacedSpan or more, the next sweep
	// asks for each page no sooner than an interval after the last did.
	cursors []string
	readAt  []time.Time
	span    time.Duration
}

// dueHeap orders entries by due time.
type dueHeap []*entry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}

// hold is the set of tasks a replica holds, their next polls in a heap, and the reads running.
type hold struct {
	mu        sync.Mutex
	tasks     map[string]*entry
	byTask    map[string]*entry // by server \x00 task id
	due       dueHeap
	perServer map[string]int      // reads running, by server
	queued    map[string][]*entry // due tasks waiting for a read slot of their server
	wake      chan struct{}
	reads     sync.WaitGroup
	groups    map[string]*group
	// sleepUntil is when the scheduler wakes next: a task due sooner wakes it.
	sleepUntil time.Time
	// window counts the reads since the last flush, for the in-flight amplification.
	window int
}

func (h *hold) init() {
	h.tasks = map[string]*entry{}
	h.byTask = map[string]*entry{}
	h.perServer = map[string]int{}
	h.queued = map[string][]*entry{}
	h.groups = map[string]*group{}
	h.wake = make(chan struct{}, 1)
}

// poke wakes the scheduler.
func (h *hold) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// add takes newly acquired tasks into the hold, each due at its stored next poll: in the
// sweep group of its connection when that connection is open and lists its tasks (the first
// sweep reads it), else on its own.
func (h *hold) add(s *Service, got []operations.Acquired) {
	if len(got) == 0 {
		return
	}
	now := time.Now()
	keys := make([]string, len(got))
	if !s.cfg.NoListSweep {
		for i, a := range got {
			if conn, ok := s.cfg.Servers.Open(a.Task.Server, a.Task); ok && mcpclient.CanList(conn) {
				keys[i] = a.Task.Server + "\x00" + conn.Info().SessionID
			}
		}
	}
	h.mu.Lock()
	for i, a := range got {
		if e := h.tasks[a.ID]; e != nil {
			// Handed back and taken again (a poke made it due in the database): keep the copy.
			if !e.reading && a.NextPollAt.Before(e.due) {
				h.schedule(e, a.NextPollAt)
			}
			continue
		}
		e := &entry{d: a.Due, due: a.NextPollAt, since: now, idx: -1, listKey: keys[i]}
		h.tasks[a.ID] = e
		h.byTask[taskKey(a.Task)] = e
		if e.listKey != "" {
			e.next = e.due
			h.place(s, e)
		} else {
			heap.Push(&h.due, e)
		}
	}
	h.mu.Unlock()
	h.poke()
}

// ids are the held tasks' operation ids.
func (h *hold) ids() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.tasks))
	for id := range h.tasks {
		out = append(out, id)
	}
	return out
}

// clear forgets every held task (after the replica stopped and handed them back).
func (h *hold) clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tasks, h.due, h.queued, h.groups = map[string]*entry{}, nil, map[string][]*entry{}, map[string]*group{}
	h.byTask = map[string]*entry{}
}

// taskKey names a held task by server and task id.
func taskKey(t *operations.Task) string { return t.Server + "\x00" + t.TaskID }

// remove takes e out of the hold's maps, heap and group (h.mu held).
func (h *hold) remove(e *entry) {
	if h.tasks[e.d.ID] == e {
		delete(h.tasks, e.d.ID)
	}
	if h.byTask[taskKey(e.d.Task)] == e {
		delete(h.byTask, taskKey(e.d.Task))
	}
	h.leaveGroup(e)
	if e.idx >= 0 {
		heap.Remove(&h.due, e.idx)
	}
}

// unchanged reports whether a notification about a held task tells nothing its copy lacks.
func (h *hold) unchanged(server, taskID string, obs operations.Observation) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.byTask[server+"\x00"+taskID]
	return e != nil && !e.reading && e.d.Task.Unchanged(obs)
}

// leaveGroup takes e out of its sweep group (h.mu held); it is scheduled on its own after.
func (h *hold) leaveGroup(e *entry) {
	g := e.group
	if g == nil {
		return
	}
	delete(g.members, e.d.Task.TaskID)
	e.group = nil
}

// schedule puts e in the heap at at, out of any sweep group (h.mu held).
func (h *hold) schedule(e *entry, at time.Time) {
	h.leaveGroup(e)
	e.due, e.moved = at, true
	if e.idx >= 0 {
		heap.Fix(&h.due, e.idx)
	} else {
		heap.Push(&h.due, e)
	}
	h.wakeFor(at)
}

// wakeFor wakes the scheduler when at comes before its next wake (h.mu held): a read that
// schedules its task an interval out costs the scheduler no wake-up.
func (h *hold) wakeFor(at time.Time) {
	if at.Before(h.sleepUntil) {
		h.poke()
	}
}

// place schedules e after a read at e.next: in its connection's sweep group when a tasks/list
// sweep can observe it, else in the heap (h.mu held).
func (h *hold) place(s *Service, e *entry) {
	t := e.d.Task
	iv := s.pollEvery(e)
	if e.listKey == "" || e.unlisted || !t.State.Watchable() || t.ResultState == "pending" {
		h.schedule(e, e.next)
		return
	}
	key := e.listKey + "\x00" + iv.String()
	g := h.groups[key]
	if g == nil {
		g = &group{key: key, server: t.Server, interval: iv, members: map[string]*entry{}}
		g.item = &entry{d: operations.Due{Operation: operations.Operation{ID: "sweep " + key, Task: &operations.Task{Server: t.Server}}},
			due: e.next, idx: -1, sweep: g}
		h.groups[key] = g
		heap.Push(&h.due, g.item)
		h.wakeFor(e.next)
	}
	if e.idx >= 0 {
		heap.Remove(&h.due, e.idx)
	}
	e.group, e.due, e.moved = g, e.next, true
	g.members[t.TaskID] = e
	if !g.item.reading && g.item.idx < 0 {
		g.item.due = e.next
		heap.Push(&h.due, g.item)
		h.wakeFor(e.next)
	}
}

// unwritten returns the reads of e not yet added to the stored count (the read in progress
// included); written takes n of them off once a write added them.
func (h *hold) unwritten(e *entry) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return e.polls
}

func (h *hold) written(e *entry, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.polls -= n
}

// delay moves a held task's next poll to at (the server's Retry-After); false when not held.
func (h *hold) delay(id string, at time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.tasks[id]
	if e == nil {
		return false
	}
	if e.reading {
		e.next = at
	} else {
		h.schedule(e, at)
	}
	e.retry = true
	return true
}

// notified applies a notification's observation to a held task's copy and, when soon, makes it
// due at once. It reports whether the task is held here.
func (h *hold) notified(id string, obs operations.Observation, res operations.ObserveResult, soon bool) bool {
	h.mu.Lock()
	e := h.tasks[id]
	if e == nil {
		h.mu.Unlock()
		return false
	}
	if e.reading {
		// The read owns the copy: it polls again at once after it ends, the row read again
		// first when the notification changed it.
		e.poke = e.poke || soon || res.Changed
		e.refresh = e.refresh || res.Changed
	} else {
		if res.Changed {
			learn(e.d.Task, obs, res.Now)
			if res.BecameTerminal {
				e.d.Task.ResultState = "pending"
			}
		}
		if soon {
			h.schedule(e, time.Now())
		}
	}
	h.mu.Unlock()
	if soon {
		h.poke()
	}
	return true
}

// pokeAt makes a held task due at at when that is sooner (a poke through the database), its
// row read again first.
func (h *hold) pokeAt(id string, at time.Time) {
	h.mu.Lock()
	e := h.tasks[id]
	if e != nil {
		e.refresh = true
	}
	switch {
	case e == nil:
	case e.reading:
		e.poke = true
	case at.Before(e.due) || e.group != nil:
		h.schedule(e, at)
	}
	h.mu.Unlock()
	h.poke()
}

// run polls held tasks as they fall due until ctx ends: each due task goes to a poller, or
// waits behind its server's reads when the server is at ServerParallel. Nothing is polled
// while the replica's beats lapsed.
func (h *hold) run(ctx context.Context, s *Service) {
	work := make(chan func())
	var pollers sync.WaitGroup
	for range s.cfg.Parallel {
		pollers.Go(func() {
			for f := range work {
				f()
			}
		})
	}
	defer pollers.Wait()
	defer close(work)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	var ready []*entry
	// rate is the reads a second falling due, measured over the last second or more (counted
	// is how many fell due since the measuring began at since): it sets how long a wake waits
	// for the reads due together.
	var rate float64
	var counted int
	since := time.Now()
	for {
		wait := time.Hour
		if s.fenced() {
			wait = s.cfg.Heartbeat / 4
			h.mu.Lock()
			h.sleepUntil = time.Now().Add(wait)
			h.mu.Unlock()
		} else {
			now := time.Now()
			ready = ready[:0]
			h.mu.Lock()
			for len(h.due) > 0 && !h.due[0].due.After(now) {
				e := heap.Pop(&h.due).(*entry)
				e.reading = true
				ready = append(ready, e)
			}
			if counted += len(ready); now.Sub(since) >= time.Second {
				rate, counted, since = float64(counted)/now.Sub(since).Seconds(), 0, now
			}
			if len(h.due) > 0 {
				// The loop wakes a little after the next task falls due, so one wake takes the
				// tasks due together: far fewer wakes of the loop and its pollers than one a task.
				wait = h.due[0].due.Sub(now) + coalesceWait(s.cfg.Coalesce, rate)
			}
			h.sleepUntil = now.Add(wait)
			var start []*entry
			for _, e := range ready {
				h.reads.Add(1)
				srv := e.d.Task.Server
				if h.perServer[srv] >= s.cfg.ServerParallel {
					h.queued[srv] = append(h.queued[srv], e)
					continue
				}
				h.perServer[srv]++
				s.metrics.inFlight.WithLabelValues(srv).Inc()
				start = append(start, e)
			}
			h.mu.Unlock()
			for _, e := range start {
				f := func() { h.readServer(ctx, s, e) }
				select {
				case work <- f:
				default: // every poller is busy (slow servers): the read runs beside them
					go f()
				}
			}
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.wake:
		}
	}
}

// coalesceReads is how many reads one wake of the scheduler gathers once reads fall due fast
// enough: a wake costs the same for 64 reads as for 600, and each read it waits for is late by
// the wait.
const coalesceReads = 64

// coalesceWait is how long after the next task falls due the scheduler wakes, when rate reads
// a second fall due: as long as coalesceReads take to fall due, at most longest (Coalesce). At
// 1,000 reads a second that is longest (50 ms); at 11,000 it is 6 ms, where a fixed 50 ms
// gathered 550 reads a wake and made each of them up to 50 ms late for no CPU it saved.
func coalesceWait(longest time.Duration, rate float64) time.Duration {
	if rate <= 0 {
		return longest
	}
	return min(longest, time.Duration(coalesceReads/rate*float64(time.Second)))
}

// readServer reads e, then goes on with the reads queued for the same server, so the slot
// passes to the next of them without a poller of its own. Once ctx ends, queued tasks are put
// back unread.
func (h *hold) readServer(ctx context.Context, s *Service, e *entry) {
	for {
		e.next, e.drop = e.due, false
		h.mu.Lock()
		refresh := e.refresh
		e.refresh = false
		h.mu.Unlock()
		if refresh && ctx.Err() == nil {
			s.reload(ctx, e)
		}
		if ctx.Err() == nil && !e.drop {
			// Each read has its own context: neither the loop moving on nor another read's
			// failure cuts it short.
			if e.sweep != nil {
				// A sweep of many pages may take longer than one read: each page has the
				// status budget, the sweep as a whole no bound but the service's life.
				s.sweep(ctx, e.sweep)
			} else {
				rctx, cancel := context.WithTimeout(ctx, s.cfg.PassTimeout)
				s.watchOne(rctx, e)
				cancel()
			}
		}
		next, ok := h.endRead(s, e)
		h.reads.Done()
		if !ok {
			return
		}
		e = next
	}
}

// endRead ends e's read: e is scheduled at its next poll or dropped, and the next read queued
// for the server, if any, takes the slot.
func (h *hold) endRead(s *Service, e *entry) (*entry, bool) {
	var lastPolls int
	h.mu.Lock()
	switch {
	case e.sweep != nil:
		e.reading = false
		if g := e.sweep; len(g.members) == 0 {
			delete(h.groups, g.key)
			for _, m := range g.members {
				h.schedule(m, m.due)
			}
		} else {
			e.due = e.next
			heap.Push(&h.due, e)
			h.wakeFor(e.due)
		}
	default:
		lastPolls = h.settle(s, e)
	}
	srv := e.d.Task.Server
	var next *entry
	if q := h.queued[srv]; len(q) > 0 {
		next = q[0]
		q[0] = nil
		if q = q[1:]; len(q) == 0 {
			delete(h.queued, srv)
		} else {
			h.queued[srv] = q
		}
	} else {
		if h.perServer[srv]--; h.perServer[srv] <= 0 {
			delete(h.perServer, srv)
		}
		s.metrics.inFlight.WithLabelValues(srv).Dec()
	}
	h.mu.Unlock()
	s.persistPolls(e.d.ID, lastPolls)
	return next, next != nil
}

// settle schedules e after its read (h.mu held): at its next poll, at once when a poke came
// meanwhile, or out of the hold when the read dropped it, returning then the reads not yet
// persisted.
func (h *hold) settle(s *Service, e *entry) int {
	e.reading = false
	switch {
	case e.drop || h.tasks[e.d.ID] != e:
		h.remove(e)
		n := e.polls
		e.polls = 0
		return n
	case e.poke:
		e.next, e.poke = time.Now(), false
		h.schedule(e, e.next)
	default:
		h.place(s, e)
	}
	return 0
}

// persistPolls writes the last reads of a task that left the hold now, not at the next flush.
func (s *Service) persistPolls(id string, n int) {
	if n <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.store.FlushProgress(ctx, s.cfg.ReplicaID, []operations.Progress{{ID: id, Polls: n}}); err != nil {
		s.log.Warn("persist poll count", "operation", id, "err", err)
	}
}

// forget drops a task from the hold: its outcome was recorded, it was given up, or another
// replica took it. A task being read is dropped when its read ends.
func (s *Service) forget(id string) {
	h := &s.hold
	var polls int
	h.mu.Lock()
	e := h.tasks[id]
	switch {
	case e == nil:
	case e.reading:
		e.drop = true
	default:
		h.remove(e)
		polls = e.polls
	}
	h.mu.Unlock()
	s.persistPolls(id, polls)
}

// counted is the one place a status read is counted: a tasks/get of one held task, or a
// tasks/list page observing the held tasks es. It counts the request in the replica's metric
// (by result) and the pass's count, and each task's observation in the task's count, which
// the next write of the task or the next flush adds to the stored one.
func (s *Service) counted(server, result string, es ...*entry) {
	s.metrics.poll(result).Inc()
	s.polled.Add(1)
	if s.cfg.PollLog != nil {
		// The Servers page's poll load: each task a read observed (a tasks/list page, each
		// task it shows), by the task's tenant.
		for _, e := range es {
			s.cfg.PollLog.Add(server, e.d.Tenant, result == "ok")
		}
	}
	s.hold.mu.Lock()
	for _, e := range es {
		e.polls++
	}
	s.hold.window += len(es)
	s.hold.mu.Unlock()
}

// flush persists, in one batch, the poll counts and next polls of the held tasks that changed
// since the last flush and were last written ProgressEvery ago or more (all of them when all
// is set, after the loops stopped): a task polled every second is written every few seconds,
// not at every flush, which is most of what a watcher writes (every row a version, every
// version counted toward the table's autovacuum and autoanalyze). It sets the
// in-flight amplification: reads made over reads due since the last flush, across every task
// held. Tasks being read are left for the next flush.
func (s *Service) flush(ctx context.Context, all bool) error {
	h := &s.hold
	now := time.Now()
	var ps []operations.Progress
	var due float64
	h.mu.Lock()
	made := h.window
	h.window = 0
	for _, e := range h.tasks {
		from := e.since
		if s.lastFlush.After(from) {
			from = s.lastFlush
		}
		if since := now.Sub(from); since > 0 && e.d.Task.State.Watchable() {
			due += float64(since) / float64(s.pollEvery(e))
		}
		if e.notify && !e.reading && !mcpclient.NotifiesStatus(e.conn) {
			// The connection stopped delivering notifications: back to the task's interval.
			e.notify, e.conn = false, nil
			if soon := now.Add(s.interval(e.d.Task)); e.due.After(soon) {
				h.schedule(e, soon)
			}
		}
		if e.reading || (!all && !e.retry && ((e.polls == 0 && !e.moved) || now.Sub(e.wroteAt) < s.cfg.ProgressEvery)) {
			continue
		}
		ps = append(ps, operations.Progress{ID: e.d.ID, Polls: e.polls, NextPollAt: e.due})
		e.polls, e.moved, e.retry, e.wroteAt = 0, false, false, now
	}
	h.mu.Unlock()
	if !s.lastFlush.IsZero() && due >= 1 {
		s.metrics.inFlightAmplification.Set(float64(made) / due)
	}
	s.lastFlush = now
	if len(ps) == 0 {
		return nil
	}
	if err := s.store.FlushProgress(ctx, s.cfg.ReplicaID, ps); err != nil {
		h.mu.Lock()
		for _, p := range ps {
			if e := h.tasks[p.ID]; e != nil {
				e.polls += p.Polls
				e.moved, e.wroteAt = true, time.Time{} // written at the next flush, retry or not
			}
		}
		h.mu.Unlock()
		return err
	}
	return nil
}

// listenPokes listens on operations.WatchPokeChannel on a connection of its own and makes
// the held tasks named there due at the time given. A poke missed while the connection is
// re-made only delays that task to its scheduled poll.
func (s *Service) listenPokes(ctx context.Context) {
	for ctx.Err() == nil {
		s.listenPokesOnce(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Service) listenPokesOnce(ctx context.Context) {
	pc, err := s.store.Pool().Acquire(ctx)
	if err != nil {
		return
	}
	conn := pc.Hijack() // held for as long as it listens, then closed: never back in the pool
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+operations.WatchPokeChannel); err != nil {
		return
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		id, ms, ok := strings.Cut(n.Payload, " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			continue
		}
		s.hold.pokeAt(id, time.UnixMilli(v))
	}
}

// randFloat is a uniform float in [0, 1) for jitter.
func randFloat() float64 {
	return rand.Float64() //nolint:gosec // jitter only spreads polls over time; it guards nothing
}
