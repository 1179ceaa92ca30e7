package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
)

// broker fans changes out to the open event streams.
type broker struct {
	mu     sync.Mutex
	subs   map[chan audit.Change]struct{}
	closed chan struct{}
	once   sync.Once
}

func newBroker() *broker {
	return &broker{subs: map[chan audit.Change]struct{}{}, closed: make(chan struct{})}
}

func (b *broker) subscribe() (<-chan audit.Change, func()) {
	ch := make(chan audit.Change, 16)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	}
}

// Publish tells every open event stream whose principal may see c's tenant that something
// changed. A slow stream misses changes rather than holding others up; its page refreshes on the
// next one. cmd/console feeds it from audit.Listen.
func (s *Server) Publish(c audit.Change) {
	b := s.events
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- c:
		default:
		}
	}
}

// CloseStreams ends every open event stream, so a graceful shutdown is not held up by them.
// Register it with http.Server.RegisterOnShutdown.
func (s *Server) CloseStreams() { s.events.once.Do(func() { close(s.events.closed) }) }

// defaultStreamCheck is how often an open stream re-checks its session (and with it the
// account's role and scope) and sends a keep-alive, unless Deps.StreamCheck says otherwise.
const defaultStreamCheck = 20 * time.Second

// handleEvents is the live-update stream (server-sent events): an event "change" with
// {"area": …} whenever an audited change the principal may see commits. Pages refresh their live
// regions on it (web/static/live.js); the stream ends when the session does.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	p := principal(r)
	sess, _ := sessionFrom(r.Context())
	ch, cancel := s.events.subscribe()
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 5000\n: connected\n\n"); err != nil {
		return
	}
	_ = rc.Flush()
	tick := time.NewTicker(s.deps.StreamCheck)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.events.closed:
			return
		case <-tick.C:
			fresh, err := s.deps.Auth.Session(r.Context(), sess.Token)
			if err != nil {
				_, _ = fmt.Fprint(w, "event: signedout\ndata: {}\n\n")
				_ = rc.Flush()
				return
			}
			// A role or scope changed since the stream opened applies from now on.
			p = fresh.Account.Principal()
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
		case c := <-ch:
			if !visible(p, c) {
				continue
			}
			data, _ := json.Marshal(map[string]string{"area": c.Area})
			if _, err := fmt.Fprintf(w, "event: change\ndata: %s\n\n", data); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// visible reports whether a change is in p's scope: its tenant, or for changes that belong to no
// single tenant, a principal of every tenant.
func visible(p auth.Principal, c audit.Change) bool { return p.Allows(c.Tenant) }
