package watch

import (
	"context"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// maxSweepPages bounds one sweep; members the sweep did not reach are read with tasks/get.
const maxSweepPages = 10_000

// sweep observes the members of a group whose next poll has come (or comes within half an
// interval, or before the last sweep's last page: see align) with one paged tasks/list sweep
// of their connection (2025-11-25, tasks.list declared): one request per page instead of a
// tasks/get per task, each listed task observed as a tasks/get answer would be (checked
// against the state machine, written only on change). The pages are read in segments at once,
// each from a cursor of the last sweep. A sweep whose last run spread over pacedSpan or more
// keeps its pages' places: it asks for each page no sooner than an interval after the last
// sweep asked for it, so a sweep quicker or slower than the last makes none of its tasks late,
// and a page read late is read an interval after that from then on; it sets out a little before
// its first page falls due (sweepLead). A shorter sweep reads its pages at once, an interval
// (plus jitter) after the last began: waiting for each page would cost a wake-up a page and
// save less lateness than pacedSpan. A group's first sweep at an interval of 4 s or more
// spreads its pages over a quarter of the interval, or more when a page needs the room. A due
// member the sweep did not list is read with tasks/get at once, and from then on. No member is
// observed more often than its interval.
func (s *Service) sweep(ctx context.Context, g *group) {
	h := &s.hold
	start := time.Now()
	item := g.item
	// A quarter of a poll's jitter: one sweep per connection has no herd of polls to spread.
	jitter := s.jitter(g.interval) / 4
	item.next = start.Add(g.interval + jitter)
	// A member whose next poll comes within half an interval is observed now rather than a
	// whole interval late: a task joining the group is aligned with its sweeps once, observed
	// at most half an interval early, as its connection is listed once per interval anyway. A
	// member falling due before the last page's turn is on a page the sweep reaches in time.
	align := start.Add(g.interval / 2)
	paced := g.span >= pacedSpan
	if n := len(g.readAt); paced && n > 0 {
		if last := g.readAt[n-1].Add(g.interval); last.After(align) {
			align = last
		}
	}
	h.mu.Lock()
	members := len(g.members)
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
	// The pages are read in segments at once, each from a cursor the last sweep was given for
	// its first page: a long list takes a fraction of a single chain's time. A cursor the server
	// no longer takes ends its segment; members no segment showed are read with tasks/get.
	starts := segmentStarts(g.cursors, s.sweepSegments(len(g.cursors)))
	var mu sync.Mutex // due, cursors, readAt, failed
	cursors := make([]string, 0, len(g.cursors)+1)
	readAt := make([]time.Time, 0, len(g.cursors)+1)
	var last []time.Time // when the last sweep asked for each page, when its places are kept
	if paced {
		last = g.readAt
	}
	// A group's first sweep spreads its pages over a quarter of the interval when that is
	// pacedSpan or more (up to three quarters when a page needs the room: spreadPace), as many
	// pages as the members fill (the pace is set once the first page shows how many a page
	// holds): the sweeps after it keep those places, so the server is read at an even pace, with
	// room for a stall, rather than in bursts.
	spread := len(g.readAt) == 0 && g.interval/4 >= pacedSpan
	var pace, cost time.Duration // cost: what reading and applying a page takes, smoothed
	perPage := 0                 // tasks on the first sweep's first page that listed any
	var failed error
	var retryAt time.Time
	segment := func(from, pages int, cursor string) {
		var prev time.Time // when this segment asked for its last page
		for p := 0; p < maxSweepPages && (pages < 0 || p < pages); p++ {
			at := time.Time{}
			if i := from + p; i < len(last) {
				at = last[i].Add(g.interval)
			} else if spread && p > 0 {
				mu.Lock()
				at = prev.Add(pace)
				mu.Unlock()
			}
			if wait := time.Until(at); wait > 0 && !sleepCtx(ctx, wait) {
				return
			}
			asked := time.Now()
			// The page was listed when the request left, not when it was made: a request
			// queued behind others on the connection (its backpressure) or slow to write
			// would otherwise start the page's next interval before the server saw it, and
			// the next listing would come that much early. Over HTTP the write is timed;
			// stdio has no such queue.
			var wrote atomic.Int64
			tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
				wrote.Store(time.Now().UnixNano())
			}})
			page, err := withRetries(tctx, wf.Budgets.Status, func(ctx context.Context) (mcpclient.ListedPage, error) {
				return mcpclient.ListObserve(ctx, conn, cursor)
			})
			if w := wrote.Load(); w != 0 {
				asked = time.Unix(0, w)
			}
			prev = asked
			// seen are the due members the page lists, place[i] where seen[i] is on the page.
			seen := make([]*entry, 0, len(page.Snapshots))
			place := make([]int, 0, len(page.Snapshots))
			mu.Lock()
			for len(cursors) <= from+p {
				cursors = append(cursors, "")
				readAt = append(readAt, time.Time{})
			}
			cursors[from+p], readAt[from+p] = cursor, asked
			for k := range page.Snapshots {
				if m := due[page.Snapshots[k].Task.ID]; m != nil {
					delete(due, page.Snapshots[k].Task.ID)
					seen = append(seen, m)
					place = append(place, k)
				}
			}
			left := len(due)
			if err != nil {
				if until, ok := mcpclient.RetryAt(err); ok && until.After(retryAt) {
					retryAt = until
				}
				failed = err
			}
			mu.Unlock()
			s.counted(g.server, pollResult(err), seen...)
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, s.cfg.PassTimeout)
			for i, m := range seen {
				s.observeListed(pctx, g, m, conn, &page.Snapshots[place[i]], asked.Add(g.interval))
			}
			cancel()
			if spread {
				// Every later sweep reads the pages where this one did, an interval on: the
				// spacing must leave the chain room to catch up after a slow page.
				mu.Lock()
				if p > 0 { // the first page may have paid for the connection
					cost = ewma(cost, time.Since(asked))
				}
				if perPage == 0 {
					perPage = len(page.Snapshots)
				}
				pace = spreadPace(cost, members, perPage, g.interval)
				mu.Unlock()
			}
			if page.NextCursor == "" || left == 0 {
				return
			}
			cursor = page.NextCursor
		}
	}
	var wg sync.WaitGroup
	for k, st := range starts {
		pages := -1 // the last segment reads to the end
		if k+1 < len(starts) {
			pages = starts[k+1].page - st.page
		}
		wg.Go(func() { segment(st.page, pages, st.cursor) })
	}
	wg.Wait()

	g.cursors, g.readAt, g.span = cursors, readAt, spanOf(readAt)
	if len(readAt) > 0 && !readAt[0].IsZero() {
		// The first page went out later than the sweep set out (a queue on the connection):
		// its next listing is an interval after it went out, not after the sweep set out.
		if at := readAt[0].Add(g.interval + jitter); at.After(item.next) {
			item.next = at
		}
	}
	if g.span >= pacedSpan && !readAt[0].IsZero() {
		// The next sweep keeps the pages' places: it sets out before its first page is due,
		// so that taking its members makes no page late, and the pages wait for their times.
		item.next = readAt[0].Add(g.interval - sweepLead(g.interval))
	}
	if failed != nil {
		g.cursors, g.readAt, g.span = nil, nil, 0 // the next sweep reads one chain from the first page
		if !retryAt.IsZero() {
			item.next = retryAt
			fallback(retryAt)
			return
		}
		s.log.Info("tasks/list sweep failed; its tasks are read with tasks/get", "server", g.server, "err", failed)
		fallback(time.Now())
		return
	}
	// Due members the list did not show (another session's, or the sweep's page bound): read
	// with tasks/get, and from then on when a single chain of pages did not show them.
	h.mu.Lock()
	for _, m := range due {
		if m.group == g && !m.reading {
			m.unlisted = len(starts) == 1
			h.schedule(m, time.Now())
		}
	}
	h.mu.Unlock()
	h.poke()
}

// pacedSpan is how long a sweep must spread over for the next to keep its pages' places. A
// shorter sweep is read at once: its length cannot vary by more than itself, and waiting for
// each page would cost a wake-up a page (at 1,000 tasks at 1 s, a third more CPU).
const pacedSpan = time.Second

// spanOf is how long a sweep spread over: from the first page asked for to the last.
func spanOf(readAt []time.Time) time.Duration {
	var lo, hi time.Time
	for _, t := range readAt {
		if t.IsZero() {
			continue
		}
		if lo.IsZero() || t.Before(lo) {
			lo = t
		}
		if t.After(hi) {
			hi = t
		}
	}
	return hi.Sub(lo)
}

// spreadPace is the spacing of a group's first sweep's pages, from one asked for to the next,
// when reading and applying a page takes cost (smoothed): the pages members fill (perPage a
// page) spread over a quarter of the interval, or over up to three quarters when that leaves
// each page less than twice its cost. The sweeps after it keep these places, so a chain that
// only just kept up made any slow page late and every page after it in its segment (100,000
// tasks at 30 s: lateness p99 0.2-1.2 s from run to run); with room it catches up.
func spreadPace(cost time.Duration, members, perPage int, iv time.Duration) time.Duration {
	pages := time.Duration(max(1, (members+max(1, perPage)-1)/max(1, perPage)))
	return min(max(iv/4/pages, 2*cost), iv*3/4/pages)
}

// ewma folds sample into the smoothed value avg (an eighth of the way; the first sample as is).
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return sample
	}
	return avg + (sample-avg)/8
}

// sweepLead is how long before its first page falls due a sweep begins: a tenth of the
// interval, at most 100 ms.
func sweepLead(iv time.Duration) time.Duration { return min(iv/10, 100*time.Millisecond) }

// sleepCtx waits d, or until ctx ends (false then).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// segmentStart is where a segment of a sweep begins: a page number and the cursor that page was
// read with in the last sweep ("" for the first).
type segmentStart struct {
	page   int
	cursor string
}

// segmentStarts splits the last sweep's pages (cursors[i] read page i) into at most n segments
// of about equal length; without a last sweep, one segment from the first page.
func segmentStarts(cursors []string, n int) []segmentStart {
	out := []segmentStart{{}}
	if len(cursors) < 2 || n < 2 {
		return out
	}
	n = min(n, len(cursors))
	for k := 1; k < n; k++ {
		p := k * len(cursors) / n
		if cursors[p] != "" && p > out[len(out)-1].page { // a page the last sweep did not reach
			out = append(out, segmentStart{page: p, cursor: cursors[p]})
		}
	}
	return out
}

// sweepSegments is how many segments a sweep of pages pages is read in at once: one per
// SweepSegmentPages, at most the server's read slots (the sweep holds one slot and its segments
// are its own reads).
func (s *Service) sweepSegments(pages int) int {
	per := s.cfg.SweepSegmentPages
	return max(1, min(s.cfg.ServerParallel, (pages+per-1)/per))
}

// observeListed applies a listed status to member m as a tasks/get answer would be applied;
// m stays in the group, due at the next sweep, unless the observation moved it.
func (s *Service) observeListed(ctx context.Context, g *group, m *entry, conn mcpclient.Conn, snap *mcpclient.Snapshot, next time.Time) {
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
	s.observed(ctx, m, conn, s.workflow(m.d.Workflow), *snap)
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
