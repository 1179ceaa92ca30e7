package watch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/watch"
)

// listPage is the reference receiver's tasks/list page size.
const listPage = 20

// listSetup is an authenticated 2025-11-25 receiver (it declares and serves tasks/list)
// behind a recording proxy, and hide, which names task ids its tasks/list answers leave out.
func listSetup(t *testing.T, interval time.Duration) (*opstest.Bundle, *faultproxy.Proxy, *hidden) {
	t.Helper()
	var proxy *faultproxy.Proxy
	hide := &hidden{ids: map[string]bool{}}
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Token: "tok-acme", Receiver: receiver.Config{DefaultPollInterval: interval},
		Front: func(t testing.TB, target string) string {
			p, err := faultproxy.New(hide.front(t, target))
			if err != nil {
				t.Fatal(err)
			}
			u, err := p.Start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			proxy = p
			return u
		}})
	return b, proxy, hide
}

// hidden is a proxy that removes some tasks from tasks/list answers, as a server that does
// not list every task a requestor can read would.
type hidden struct {
	mu  sync.Mutex
	ids map[string]bool
	// slow delays each tasks/list answer while set.
	slow time.Duration
	// lists records each tasks/list request: its cursor and when it came.
	lists []listed
}

// listed is one tasks/list request the front saw.
type listed struct {
	cursor string
	at     time.Time
}

func (h *hidden) listings() []listed {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]listed(nil), h.lists...)
}

func (h *hidden) setSlow(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.slow = d
}

func (h *hidden) hide(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids[id] = true
}

func (h *hidden) front(t testing.TB, target string) string {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	rp.FlushInterval = -1
	rp.ModifyResponse = func(r *http.Response) error {
		if r.Request.Header.Get("X-Tasks-List") == "" {
			return nil
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) == nil && m["result"] != nil {
			var res map[string]json.RawMessage
			_ = json.Unmarshal(m["result"], &res)
			var tasks []map[string]any
			_ = json.Unmarshal(res["tasks"], &tasks)
			kept := tasks[:0]
			h.mu.Lock()
			for _, tk := range tasks {
				if id, _ := tk["taskId"].(string); !h.ids[id] {
					kept = append(kept, tk)
				}
			}
			h.mu.Unlock()
			res["tasks"], _ = json.Marshal(kept)
			m["result"], _ = json.Marshal(res)
			body, _ = json.Marshal(m)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Del("Content-Length")
		return nil
	}
	h2 := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"tasks/list"`)) {
			r.Header.Set("X-Tasks-List", "1")
			var req struct {
				Params struct {
					Cursor string `json:"cursor"`
				} `json:"params"`
			}
			_ = json.Unmarshal(body, &req)
			h.mu.Lock()
			h.lists = append(h.lists, listed{cursor: req.Params.Cursor, at: time.Now()})
			slow := h.slow
			h.mu.Unlock()
			time.Sleep(slow)
		}
		rp.ServeHTTP(w, r)
	})
	return serveLoopback(t, h2, u.Path)
}

// serveLoopback serves h on a free port of 127.0.0.1 until the test ends and returns its URL
// with path.
func serveLoopback(t testing.TB, h http.Handler, path string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + path
}

// requests counts the proxy's requests of method after since, by task id ("" for tasks/list).
func requests(p *faultproxy.Proxy, method string, since time.Time) map[string]int {
	out := map[string]int{}
	for _, m := range p.Messages() {
		if m.Dir == "request" && m.Method == method && m.At.After(since) {
			out[m.TaskID]++
		}
	}
	return out
}

func storedPolls(t *testing.T, b *opstest.Bundle, ids []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		out[id] = b.Detail(t, id).Task.Polls
	}
	return out
}

// TestListSweepObservesEveryTaskWithOneRequestPerPage: on a server that declares tasks/list,
// the watcher observes every task with tasks/list sweeps: at most ceil(N/page) list requests
// per interval, no tasks/get for a listed task, and every task's observations counted.
func TestListSweepObservesEveryTaskWithOneRequestPerPage(t *testing.T) {
	t.Parallel()
	const n = 45
	const interval = 100 * time.Millisecond
	b, proxy, _ := listSetup(t, interval)
	var ids, taskIDs []string
	for i := range n {
		id := b.Start(t, "refund", fmt.Sprintf("list-%d", i), `{"outcome": "hang"}`).Response.OperationID
		ids = append(ids, id)
		taskIDs = append(taskIDs, b.Detail(t, id).Task.TaskID)
	}
	_, passes := b.Watcher(t, "r1", nil)
	// Sweeps running (the connection that created the tasks is open and lists them, so the
	// tasks join the sweeps as they are taken in, without a tasks/get first).
	opstest.WaitFor(t, passes, 20*time.Second, "sweeps", func() bool {
		return requests(proxy, "tasks/list", time.Time{})[""] >= 3*((n+listPage-1)/listPage)
	})
	began := time.Now()
	before := storedPolls(t, b, ids)
	opstest.WaitFor(t, passes, 20*time.Second, "ten more sweeps", func() bool {
		return requests(proxy, "tasks/list", began)[""] >= 10*((n+listPage-1)/listPage)
	})
	span := time.Since(began)
	lists := requests(proxy, "tasks/list", began)[""]
	if limit := ((n + listPage - 1) / listPage) * (int(span/interval) + 1); lists > limit {
		t.Fatalf("%d tasks/list requests in %v, more than %d: more than one sweep per interval", lists, span, limit)
	}
	gets := requests(proxy, "tasks/get", began)
	for _, tid := range taskIDs {
		if gets[tid] > 0 {
			t.Fatalf("task %s was read with tasks/get %d times while the sweeps listed it", tid, gets[tid])
		}
	}
	time.Sleep(100 * time.Millisecond) // one flush period of the test watcher
	after := storedPolls(t, b, ids)
	for _, id := range ids {
		if after[id] <= before[id] {
			t.Fatalf("operation %s: %d stored observations before the sweeps, %d after", id, before[id], after[id])
		}
	}
	t.Logf("%d tasks: %d tasks/list requests in %v, no tasks/get", n, lists, span.Round(time.Millisecond))
}

// TestATaskTheListDoesNotShowIsReadWithTasksGet: a task missing from the server's tasks/list
// answers is read with tasks/get, and followed to its end, while the listed ones are not.
func TestATaskTheListDoesNotShowIsReadWithTasksGet(t *testing.T) {
	t.Parallel()
	b, proxy, hide := listSetup(t, 100*time.Millisecond)
	var listed []string
	for i := range 5 {
		id := b.Start(t, "refund", fmt.Sprintf("shown-%d", i), `{"outcome": "hang"}`).Response.OperationID
		listed = append(listed, b.Detail(t, id).Task.TaskID)
	}
	absent := b.Start(t, "refund", "absent", `{"duration_ms": 2500}`).Response.OperationID
	absentTask := b.Detail(t, absent).Task.TaskID
	hide.hide(absentTask)
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 20*time.Second, "sweeps", func() bool { return requests(proxy, "tasks/list", time.Time{})[""] >= 3 })
	began := time.Now()
	opstest.WaitFor(t, passes, 20*time.Second, "the unlisted task settled", func() bool {
		d := b.Detail(t, absent)
		return d.Task.State.Final() && d.Envelope != nil
	})
	if d := b.Detail(t, absent); d.Task.State != operations.StateCompleted {
		t.Fatalf("the unlisted task ended %s", d.Task.State)
	}
	gets := requests(proxy, "tasks/get", began)
	if gets[absentTask] < 2 {
		t.Fatalf("the unlisted task was read with tasks/get %d times after the sweeps began", gets[absentTask])
	}
	for _, tid := range listed {
		if gets[tid] > 0 {
			t.Fatalf("listed task %s read with tasks/get %d times", tid, gets[tid])
		}
	}
}

// notifySetup is a 2025-11-25 receiver behind a recording proxy whose status notifications
// reach the watcher on the session's GET stream; a first task that ends shows the watcher
// that this connection delivers them.
func notifySetup(t *testing.T) (*opstest.Bundle, *faultproxy.Proxy, <-chan int) {
	t.Helper()
	b, proxy := behindProxy(t, "legacy")
	first := b.Start(t, "refund", "first", `{"duration_ms": 200}`).Response.OperationID
	_, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.SafetyNet = 600 * time.Millisecond })
	opstest.WaitFor(t, passes, 10*time.Second, "a first status notification", func() bool {
		for _, m := range proxy.Messages() {
			if m.Dir == "stream" && m.Method == "notifications/tasks/status" {
				return b.Detail(t, first).Envelope != nil
			}
		}
		return false
	})
	return b, proxy, passes
}

// sources returns the timeline sources of the entries of state.
func sources(t *testing.T, b *opstest.Bundle, id string, state string) []string {
	var out []string
	for _, e := range b.Detail(t, id).Timeline {
		if e.State == state {
			out = append(out, e.Source)
		}
	}
	return out
}

// TestNotificationsSlowPollingToTheSafetyNet: while the connection delivers status
// notifications, a task suggested a 50 ms interval is polled every 600 ms (the safety net),
// and its end is learnt from the notification.
func TestNotificationsSlowPollingToTheSafetyNet(t *testing.T) {
	t.Parallel()
	b, proxy, passes := notifySetup(t)
	id := b.Start(t, "refund", "noted", `{"duration_ms": 3000}`).Response.OperationID
	tid := b.Detail(t, id).Task.TaskID
	opstest.WaitFor(t, passes, 20*time.Second, "settled", func() bool { d := b.Detail(t, id); return d.Task.State.Final() && d.Envelope != nil })
	gets := requests(proxy, "tasks/get", time.Time{})[tid]
	// At its 50 ms interval the task would be read about 60 times in its 3 s; at the 600 ms
	// safety net 5 or 6 (and the reads fetching its outcome).
	if gets > 10 {
		t.Fatalf("the task was read %d times in 3 s: polling did not slow to the safety net", gets)
	}
	if src := sources(t, b, id, string(operations.StateCompleted)); len(src) == 0 || src[0] != operations.SourceNotification {
		t.Fatalf("the completion was recorded from %v, want the notification", src)
	}
	t.Logf("%d tasks/get in 3 s with notifications", gets)
}

// TestAMissedNotificationIsCaughtByTheSafetyNet: when the server stops sending notifications,
// a task's end is still learnt, by a safety-net poll.
func TestAMissedNotificationIsCaughtByTheSafetyNet(t *testing.T) {
	t.Parallel()
	b, proxy, passes := notifySetup(t)
	b.Receiver.Knobs().SilenceStatus(true)
	id := b.Start(t, "refund", "unnoted", `{"duration_ms": 1000}`).Response.OperationID
	tid := b.Detail(t, id).Task.TaskID
	opstest.WaitFor(t, passes, 20*time.Second, "settled", func() bool { d := b.Detail(t, id); return d.Task.State.Final() && d.Envelope != nil })
	if d := b.Detail(t, id); d.Task.State != operations.StateCompleted {
		t.Fatalf("ended %s", d.Task.State)
	}
	if src := sources(t, b, id, string(operations.StateCompleted)); len(src) == 0 || src[0] != operations.SourcePoll {
		t.Fatalf("the completion was recorded from %v, want a poll", src)
	}
	if gets := requests(proxy, "tasks/get", time.Time{})[tid]; gets > 8 {
		t.Fatalf("the task was read %d times in 1 s: it was not polled at the safety net", gets)
	}
}

// TestAmplificationIsReportedForTasksInFlight: the in-flight amplification counts tasks that
// have not finished (the per-task histogram only counts finished ones).
func TestAmplificationIsReportedForTasksInFlight(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "extension"})
	for i := range 6 {
		b.Start(t, "refund", fmt.Sprintf("amp-%d", i), `{"outcome": "hang"}`)
	}
	reg := prometheus.NewRegistry()
	_, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.Registerer = reg; c.FlushEvery = 500 * time.Millisecond })
	var amp float64
	opstest.WaitFor(t, passes, 20*time.Second, "an in-flight amplification", func() bool {
		amp = plainMetric(t, reg, "taskgate_watch_polling_amplification_in_flight")
		return amp > 0
	})
	var working int
	if err := b.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks WHERE state = 'working'`).Scan(&working); err != nil || working != 6 {
		t.Fatalf("%d tasks working (%v): the figure must come from tasks in flight", working, err)
	}
	if amp > 1.25 {
		t.Fatalf("in-flight amplification %.2f: tasks polled more often than their interval", amp)
	}
	t.Logf("in-flight amplification %.2f", amp)
}

// TestALoneTaskIsSweptEveryInterval: a single task, nothing else happening, is observed by a
// sweep each interval once it joined its connection's sweep group (the group's first sweep
// wakes the scheduler by itself).
func TestALoneTaskIsSweptEveryInterval(t *testing.T) {
	t.Parallel()
	b, proxy, _ := listSetup(t, 100*time.Millisecond)
	id := b.Start(t, "refund", "alone", `{"outcome": "hang"}`).Response.OperationID
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 20*time.Second, "five sweeps", func() bool { return requests(proxy, "tasks/list", time.Time{})[""] >= 5 })
	if d := b.Detail(t, id); d.Task.State != operations.StateWorking {
		t.Fatalf("state %s", d.Task.State)
	}
}

// TestASweepInSegmentsObservesEveryTaskOnce: a sweep read in segments at once, each from the
// cursor the last sweep read its first page with, still observes every task without a
// tasks/get and lists each page once per interval.
func TestASweepInSegmentsObservesEveryTaskOnce(t *testing.T) {
	t.Parallel()
	const n = 45
	const interval = 100 * time.Millisecond
	b, proxy, hide := listSetup(t, interval)
	var taskIDs []string
	for i := range n {
		id := b.Start(t, "refund", fmt.Sprintf("seg-%d", i), `{"outcome": "hang"}`).Response.OperationID
		taskIDs = append(taskIDs, b.Detail(t, id).Task.TaskID)
	}
	// Each page takes a while to answer: a page is asked for while the one before it is still
	// unanswered only if the sweep reads in segments.
	hide.setSlow(40 * time.Millisecond)
	// One segment per page: 3 at once for 45 tasks.
	_, passes := b.Watcher(t, "r1", func(c *watch.Config) { c.SweepSegmentPages = 1 })
	opstest.WaitFor(t, passes, 20*time.Second, "sweeps", func() bool { return requests(proxy, "tasks/list", time.Time{})[""] >= 6 })
	began := time.Now()
	opstest.WaitFor(t, passes, 20*time.Second, "ten more sweeps", func() bool { return requests(proxy, "tasks/list", began)[""] >= 30 })
	span := time.Since(began)
	// Segments read at once: a tasks/list request is sent while another is still unanswered.
	open, overlapped := map[string]bool{}, false
	for _, m := range proxy.Messages() {
		if m.Method != "tasks/list" || !m.At.After(began) {
			continue
		}
		switch m.Dir {
		case "request":
			overlapped = overlapped || len(open) > 0
			open[m.ID] = true
		case "response":
			delete(open, m.ID)
		}
	}
	if !overlapped {
		t.Fatal("no two tasks/list requests were out at once: the sweeps were not read in segments")
	}
	if lists := requests(proxy, "tasks/list", began)[""]; lists > 3*(int(span/interval)+1) {
		t.Fatalf("%d tasks/list requests in %v: pages read more than once per interval", lists, span)
	}
	gets := requests(proxy, "tasks/get", began)
	for _, tid := range taskIDs {
		if gets[tid] > 0 {
			t.Fatalf("task %s read with tasks/get while the segmented sweeps listed it", tid)
		}
	}
}

// TestAPageIsListedNoSoonerThanAnIntervalAfterItsLastListing: once a sweep spreads over a
// second or more (pacedSpan), the next asks for each page no sooner than an interval after the last sweep
// asked for it, so a sweep quicker than the last (the server answering faster) observes none
// of a page's tasks early, and a slower one shifts the pages after it for good instead of making
// them late again at the next sweep.
func TestAPageIsListedNoSoonerThanAnIntervalAfterItsLastListing(t *testing.T) {
	t.Parallel()
	const n = 65 // four pages
	const interval = 2 * time.Second
	b, _, hide := listSetup(t, interval)
	for i := range n {
		b.Start(t, "refund", fmt.Sprintf("pace-%d", i), `{"outcome": "hang"}`)
	}
	// Slow answers first: the pages of a sweep are 600 ms apart (1.8 s from first to last),
	// then a few ms.
	hide.setSlow(600 * time.Millisecond)
	_, passes := b.Watcher(t, "r1", nil)
	// whole counts the sweeps that listed all four pages (a sweep begins at the first page).
	whole := func() int {
		k, pages := 0, 0
		for _, l := range hide.listings() {
			if l.cursor == "" {
				pages = 0
			}
			if pages++; pages == 4 {
				k++
			}
		}
		return k
	}
	opstest.WaitFor(t, passes, 40*time.Second, "two whole slow sweeps", func() bool { return whole() >= 2 })
	hide.setSlow(0)
	fast := time.Now()
	done := whole() + 3
	opstest.WaitFor(t, passes, 40*time.Second, "three whole quick sweeps", func() bool { return whole() >= done })
	last := map[string]time.Time{}
	pages, checked := map[string]bool{}, 0
	for _, l := range hide.listings() {
		pages[l.cursor] = true
		if prev, ok := last[l.cursor]; ok {
			// The watcher times a page by when its request was written; the front records it
			// when its handler runs, two hops on (the fault proxy, then this handler), and on a
			// loaded 2-core machine running every package's tests one hop can take 20-40 ms
			// longer for one request than for the next. A page listed a pace early (600 ms
			// here) is what this test is for.
			if gap := l.at.Sub(prev); gap < interval-50*time.Millisecond {
				t.Fatalf("page %q listed %v after its last listing, within its %v interval", l.cursor, gap.Round(time.Millisecond), interval)
			}
			if l.at.After(fast) {
				checked++
			}
		}
		last[l.cursor] = l.at
	}
	if len(pages) != 4 || checked < 8 {
		t.Fatalf("%d pages, %d listings checked after the answers got quick; want 4 pages and at least 8", len(pages), checked)
	}
}

// heldFirstList holds the first tasks/list request on the client's side for a while before it
// is written, as a queue on the connection would.
type heldFirstList struct {
	next http.RoundTripper
	hold time.Duration
	once sync.Once
}

func (h *heldFirstList) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.GetBody != nil {
		if body, err := r.GetBody(); err == nil {
			b, _ := io.ReadAll(io.LimitReader(body, 1<<20))
			body.Close()
			if bytes.Contains(b, []byte(`"tasks/list"`)) {
				h.once.Do(func() { time.Sleep(h.hold) })
			}
		}
	}
	return h.next.RoundTrip(r)
}

// TestAListingHeldOnTheConnectionStartsItsIntervalWhenItLeaves: a tasks/list request that waited
// on the client's side before it was written (a queue on the connection) was seen by the server
// that much later; the page's next listing comes an interval after the server saw it, not an
// interval after the sweep set out.
func TestAListingHeldOnTheConnectionStartsItsIntervalWhenItLeaves(t *testing.T) {
	t.Parallel()
	const interval = 2 * time.Second
	const hold = 600 * time.Millisecond
	b, _, hide := listSetup(t, interval)
	// Before the first dial: a connection takes the client's transport when it is made.
	c := b.Servers.HTTPClient("rcv")
	c.Transport = &heldFirstList{next: c.Transport, hold: hold}
	for i := range 5 { // one page
		b.Start(t, "refund", fmt.Sprintf("held-%d", i), `{"outcome": "hang"}`)
	}
	_, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 30*time.Second, "three listings", func() bool { return len(hide.listings()) >= 3 })
	ls := hide.listings()
	for i := 1; i < len(ls); i++ {
		if ls[i].cursor != "" || ls[i-1].cursor != "" {
			t.Fatalf("listings of more than one page: %+v", ls)
		}
		if gap := ls[i].at.Sub(ls[i-1].at); gap < interval-10*time.Millisecond {
			t.Fatalf("listing %d came %v after the one before, within the %v interval", i, gap.Round(time.Millisecond), interval)
		}
	}
}
