package web

import (
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskgate/taskgate/auth"
)

// Defaults of the limits in Deps.
const (
	defaultBodyReadTimeout   = 30 * time.Second
	defaultStreamsPerSession = 8
	defaultStreamsTotal      = 512
)

// bodyDeadline gives every request with a body BodyReadTimeout to send all of it: a body that
// trickles in is cut off when the time runs out, and the handler's read fails. Requests without
// a body (the live-update streams among them) keep no read deadline, so streams stay open.
func (s *Server) bodyDeadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			_ = http.NewResponseController(w).SetReadDeadline(s.deps.Now().Add(s.deps.BodyReadTimeout))
			// Once the body is in, the server clears the deadline itself before it watches the
			// connection for the client going away (TestBodyDeadlineEndsWithTheBody).
		}
		next.ServeHTTP(w, r)
	})
}

// streamLimiter counts open live-update streams per session and in total.
type streamLimiter struct {
	mu         sync.Mutex
	perSession map[string]int
	total      int
}

// acquire reserves a stream for session key unless a cap is reached; release gives it back.
func (l *streamLimiter) acquire(key string, perSession, total int) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= total || l.perSession[key] >= perSession {
		return nil, false
	}
	if l.perSession == nil {
		l.perSession = map[string]int{}
	}
	l.perSession[key]++
	l.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.perSession[key]--; l.perSession[key] <= 0 {
				delete(l.perSession, key)
			}
		})
	}, true
}

// limitStreams admits a live-update stream only while its session has fewer than
// StreamsPerSession open and the console fewer than StreamsTotal; past a cap it answers 429.
func (s *Server) limitStreams(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, _ := sessionFrom(r.Context())
		release, ok := s.streams.acquire(string(sessionKeyOf(sess)), s.deps.StreamsPerSession, s.deps.StreamsTotal)
		if !ok {
			w.Header().Set("Retry-After", "30")
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "too many live-update streams open; close some tabs", http.StatusTooManyRequests)
			return
		}
		defer release()
		next(w, r)
	}
}

// sessionKeyOf names a session without holding its cookie value.
func sessionKeyOf(sess auth.Session) []byte {
	h := auth.HashSessionToken(sess.Token)
	return h
}

// clientAddr is the address sign-in throttling and logs use for the request: the peer address,
// or, when the peer is a trusted proxy, the nearest address in X-Forwarded-For that is not a
// trusted proxy itself. A forwarded header from anyone else is ignored.
func (s *Server) clientAddr(r *http.Request) string {
	peer := peerAddr(r)
	if !s.fromTrustedProxy(peer) {
		return peer.String()
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		a = a.Unmap()
		if !s.fromTrustedProxy(a) {
			return a.String()
		}
	}
	return peer.String()
}

// peerAddr is the request's peer address (the invalid Addr when it cannot be read).
func peerAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap()
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, _ := netip.ParseAddr(host)
	return a.Unmap()
}

// fromTrustedProxy reports whether addr is one of the trusted proxies.
func (s *Server) fromTrustedProxy(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	for _, p := range s.deps.TrustedProxy.Proxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// secure reports whether cookies must be Secure: served over TLS, told so by Deps, or a
// trusted proxy says the browser's request was HTTPS (X-Forwarded-Proto).
func (s *Server) secure(r *http.Request) bool {
	if r.TLS != nil || s.deps.SecureCookies {
		return true
	}
	return s.fromTrustedProxy(peerAddr(r)) && strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
}

// retryAfter is a Retry-After header value for d, at least one second.
func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
