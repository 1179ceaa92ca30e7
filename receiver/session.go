package receiver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
)

// outbound is a channel to the client for server-sent messages: an SSE
// stream (a GET stream or a POST answered as SSE) or the stdio writer.
type outbound interface {
	send(msg any) error
	done() <-chan struct{}
}

func alive(o outbound) bool {
	if o == nil {
		return false
	}
	select {
	case <-o.done():
		return false
	default:
		return true
	}
}

// sseStream writes JSON-RPC messages as SSE events on an HTTP response. It
// never sends event ids: streams are not resumable.
type sseStream struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	f      http.Flusher
	closed chan struct{}
	once   sync.Once
}

func newSSE(w http.ResponseWriter, status int) *sseStream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(status)
	f, _ := w.(http.Flusher)
	if f != nil {
		f.Flush()
	}
	return &sseStream{w: w, f: f, closed: make(chan struct{})}
}

func (s *sseStream) send(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return errStreamClosed
	default:
	}
	if _, err := fmt.Fprintf(s.w, "event: message\ndata: %s\n\n", b); err != nil {
		s.closeLocked()
		return fmt.Errorf("write event: %w", err)
	}
	if s.f != nil {
		s.f.Flush()
	}
	return nil
}

func (s *sseStream) done() <-chan struct{} { return s.closed }

func (s *sseStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *sseStream) closeLocked() { s.once.Do(func() { close(s.closed) }) }

var errStreamClosed = fmt.Errorf("stream closed")

// session is a 2025-11-25 session (HTTP, by Mcp-Session-Id) or a stdio
// connection (either era).
type session struct {
	r      *Receiver
	id     string
	ident  Identity
	stdio  outbound // stdio: the one writer for everything
	mu     sync.Mutex
	gets   []*sseStream
	pend   map[string]func(*message)
	nextID int
	closed chan struct{}
	once   sync.Once
	// caps are the capabilities the client's initialize declared.
	caps obj
}

// declareCapabilities records what the client's initialize declared.
func (s *session) declareCapabilities(initParams obj) {
	caps := sub(initParams, "capabilities")
	if caps == nil {
		caps = obj{}
	}
	s.mu.Lock()
	s.caps = caps
	s.mu.Unlock()
}

// capabilities are the client's declared capabilities (empty before
// initialize).
func (s *session) capabilities() obj {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.caps == nil {
		return obj{}
	}
	return s.caps
}

func (r *Receiver) newSession(ident Identity, stdio outbound) *session {
	s := &session{r: r, id: newID("sess_"), ident: ident, stdio: stdio, pend: map[string]func(*message){}, closed: make(chan struct{})}
	r.sessMu.Lock()
	r.sessions[s.id] = s
	r.sessMu.Unlock()
	return s
}

func (r *Receiver) session(id string) *session {
	r.sessMu.Lock()
	defer r.sessMu.Unlock()
	return r.sessions[id]
}

func (r *Receiver) endSession(s *session) {
	r.sessMu.Lock()
	delete(r.sessions, s.id)
	r.sessMu.Unlock()
	s.close()
}

func (s *session) close() {
	s.once.Do(func() {
		close(s.closed)
		s.mu.Lock()
		for _, g := range s.gets {
			g.close()
		}
		s.gets = nil
		s.mu.Unlock()
	})
}

// getStream returns the stream for unsolicited messages: the stdio writer,
// or the newest live GET stream; nil when there is none.
func (s *session) getStream() outbound {
	if s.stdio != nil {
		return s.stdio
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.gets) - 1; i >= 0; i-- {
		if alive(s.gets[i]) {
			return s.gets[i]
		}
	}
	return nil
}

func (s *session) addGet(g *sseStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.gets[:0]
	for _, x := range s.gets {
		if alive(x) {
			live = append(live, x)
		}
	}
	s.gets = append(live, g)
}

// sendRequest sends a server→client request on out and registers onResp for
// its response. It returns the request id.
func (s *session) sendRequest(out outbound, method string, params obj, onResp func(*message)) (string, error) {
	s.mu.Lock()
	s.nextID++
	id := fmt.Sprintf("srv-%d", s.nextID)
	s.pend[id] = onResp
	s.mu.Unlock()
	if err := out.send(request(id, method, params)); err != nil {
		s.mu.Lock()
		delete(s.pend, id)
		s.mu.Unlock()
		return "", err
	}
	return id, nil
}

// deliverResponse routes a client response to the request it answers. It
// reports whether the id was one the session was waiting for.
func (s *session) deliverResponse(m *message) bool {
	var id string
	if err := json.Unmarshal(m.ID, &id); err != nil {
		return false
	}
	s.mu.Lock()
	f := s.pend[id]
	delete(s.pend, id)
	s.mu.Unlock()
	if f == nil {
		return false
	}
	f(m)
	return true
}

// notifier delivers status notifications in order, off the store's lock.
type notifier struct {
	mu    sync.Mutex
	cond  *sync.Cond
	queue []taskSnapshot
	stop  bool
}

func newNotifier() *notifier {
	n := &notifier{}
	n.cond = sync.NewCond(&n.mu)
	return n
}

func (n *notifier) push(s taskSnapshot) {
	n.mu.Lock()
	n.queue = append(n.queue, s)
	n.mu.Unlock()
	n.cond.Signal()
}

func (n *notifier) shutdown() {
	n.mu.Lock()
	n.stop = true
	n.mu.Unlock()
	n.cond.Broadcast()
}

func (n *notifier) run(deliver func(taskSnapshot)) {
	for {
		n.mu.Lock()
		for len(n.queue) == 0 && !n.stop {
			n.cond.Wait()
		}
		if n.stop {
			n.mu.Unlock()
			return
		}
		s := n.queue[0]
		n.queue = n.queue[1:]
		n.mu.Unlock()
		deliver(s)
	}
}

// subscription is a 2026-07-28 subscriptions/listen stream.
type subscription struct {
	id      string
	tenant  string
	taskIDs map[string]bool
	out     outbound
}

// publishStatus sends a status change to whoever listens: the legacy
// session's GET stream (notifications/tasks/status), extension subscribers
// (notifications/tasks). With the input-on-GET knob it also delivers
// 2025-11-25 input requests there.
func (r *Receiver) publishStatus(ts taskSnapshot) {
	if r.knobs.silenced() {
		return
	}
	if ts.Era == eraLegacy {
		s := r.session(ts.SessionID)
		if s == nil {
			return
		}
		if out := s.getStream(); out != nil {
			_ = out.send(notification("notifications/tasks/status", ts.legacyTask()))
			if inputOnGet, _, _ := r.knobs.flags(); inputOnGet && ts.Status == StatusInputRequired {
				r.deliverLegacyInputs(ts.ID, s, out)
			}
		}
		return
	}
	r.subMu.Lock()
	var subs []*subscription
	for _, sub := range r.subs {
		if sub.tenant == ts.Tenant && sub.taskIDs[ts.ID] && alive(sub.out) {
			subs = append(subs, sub)
		}
	}
	r.subMu.Unlock()
	for _, sub := range subs {
		p := ts.detailedTask()
		p["_meta"] = obj{MetaSubscriptionID: sub.id}
		_ = sub.out.send(notification("notifications/tasks", p))
	}
}

// deliverLegacyInputs sends each unanswered input request of the task that
// is not outstanding on a live stream as an elicitation/create request with
// related-task _meta on out; the client's response answers it.
func (r *Receiver) deliverLegacyInputs(taskID string, s *session, out outbound) {
	st := r.tasks
	st.mu.Lock()
	t := st.tasks[taskID]
	if t == nil || t.status != StatusInputRequired {
		st.mu.Unlock()
		return
	}
	type toSend struct {
		p   *pendingInput
		key string
	}
	var sends []toSend
	once := r.knobs.askingOnce()
	for _, k := range t.unanswered() {
		p := t.inputs[k]
		if alive(p.sentOn) || (once && p.sentOn != nil) {
			continue
		}
		p.sentOn = out
		sends = append(sends, toSend{p, k})
	}
	st.mu.Unlock()
	for _, x := range sends {
		params := obj{}
		for k, v := range x.p.req.Params {
			params[k] = v
		}
		params["_meta"] = obj{MetaRelatedTask: obj{"taskId": taskID}}
		key := x.key
		_, err := s.sendRequest(out, x.p.req.Method, params, func(m *message) {
			ans := m.Result
			if m.Error != nil {
				ans = json.RawMessage(`{"action":"cancel"}`)
			}
			st.answer(t, map[string]json.RawMessage{key: ans})
		})
		if err != nil {
			st.mu.Lock()
			if x.p.sentOn == out {
				x.p.sentOn = nil
			}
			st.mu.Unlock()
		}
	}
}
