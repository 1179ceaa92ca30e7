// Package web is Taskgate's operator console and HTTP API: chi routes, handlers, templ pages and
// embedded static assets. It imports the domain packages; they never import it.
package web

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/a-h/templ"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/reconcile"
	"github.com/taskgate/taskgate/rollout"
)

//go:embed static
var staticFS embed.FS

// Readiness reports whether the console can serve: the database reachable and its schema
// current. A nil error means ready; otherwise the error says why not.
type Readiness interface {
	Ready(ctx context.Context) error
}

// ReadinessFunc adapts a function to Readiness.
type ReadinessFunc func(ctx context.Context) error

// Ready calls f.
func (f ReadinessFunc) Ready(ctx context.Context) error { return f(ctx) }

// Deps are what the console's handlers need.
type Deps struct {
	// Logger receives request logs and handler errors.
	Logger *slog.Logger
	// Ready backs /readyz.
	Ready Readiness
	// Registry collects the metrics served at /metrics; NewServer registers its own on it.
	Registry *prometheus.Registry
	// Version is the build shown in the footer.
	Version string
	// Policy is the policy file in force.
	Policy *config.Config
	// StreamCheck is how often an open live-update stream re-checks its session, role and
	// scope (default 20 s).
	StreamCheck time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Auth keeps accounts, sessions and API tokens (required).
	Auth *auth.Store
	// Audit reads the audit log for its page (required).
	Audit *audit.Store
	// TrustedProxy enables sign-in by an authenticating reverse proxy's header (off when its
	// Header is empty).
	TrustedProxy TrustedProxy
	// SecureCookies marks cookies Secure even when the request did not arrive over TLS (set it
	// behind a TLS-terminating proxy). Without it they are Secure when a trusted proxy's
	// X-Forwarded-Proto says https.
	SecureCookies bool
	// MetricsToken, when set, serves /metrics on the console's address to callers presenting
	// it as a bearer token. Unset, the console's address does not serve /metrics: serve
	// MetricsHandler on a listen address of its own.
	MetricsToken string
	// BodyReadTimeout is how long a request may take to send its body (default 30 s).
	BodyReadTimeout time.Duration
	// StreamsPerSession and StreamsTotal cap the open live-update streams (defaults 8 and
	// 512); past a cap a new stream is answered 429.
	StreamsPerSession int
	StreamsTotal      int
	// Manifests keeps capability manifests and probes (nil: the servers pages show none).
	Manifests *manifests.Store
	// Prober probes a server on demand ("probe now"); nil hides the action.
	Prober *manifests.Prober
	// Router decides routes for the workflows page; nil shows the policy only.
	Router *rollout.Router
	// Operations starts and follows operations for /api/v1 (nil: those routes answer 503).
	Operations OperationsAPI
	// Reconcile is the reconciliation queue (nil: its pages say it is not enabled).
	Reconcile *reconcile.Store
	// Gates keeps gate runs and the repeat queue (nil: the gates page says none are stored).
	Gates *gates.Store
	// Flags are the feature flags and kill switches (nil: their pages and OFREP are off).
	Flags *killswitch.Service
	// Rollouts moves workflows through their rollout stages (nil: the Rollouts page is off).
	Rollouts *rollout.Controller
	// KillSwitchFourEyes makes a kill switch release wait for a second operator's approval.
	KillSwitchFourEyes bool
}

// Server is the console's HTTP handler.
type Server struct {
	deps    Deps
	metrics *httpMetrics
	handler http.Handler
	events  *broker
	streams streamLimiter
}

// NewServer builds the console's handler with every route in routes.go.
func NewServer(deps Deps) (*Server, error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Registry == nil {
		deps.Registry = prometheus.NewRegistry()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.StreamCheck <= 0 {
		deps.StreamCheck = defaultStreamCheck
	}
	if deps.BodyReadTimeout <= 0 {
		deps.BodyReadTimeout = defaultBodyReadTimeout
	}
	if deps.StreamsPerSession <= 0 {
		deps.StreamsPerSession = defaultStreamsPerSession
	}
	if deps.StreamsTotal <= 0 {
		deps.StreamsTotal = defaultStreamsTotal
	}
	if deps.Ready == nil {
		return nil, errors.New("web: Deps.Ready is required")
	}
	if deps.Auth == nil || deps.Audit == nil {
		return nil, errors.New("web: Deps.Auth and Deps.Audit are required")
	}
	m, err := newHTTPMetrics(deps.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{deps: deps, metrics: m, events: newBroker()}
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP serves the console.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// render writes a templ component with status. It renders into a buffer first, so a failure
// never sends half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		s.serverError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// serverError logs err with the request id and answers with a safe message.
func (s *Server) serverError(w http.ResponseWriter, r *http.Request, err error) {
	s.deps.Logger.ErrorContext(r.Context(), "request failed", "err", err, "path", r.URL.Path, "request_id", requestID(r.Context()))
	http.Error(w, "internal error (request "+requestID(r.Context())+")", http.StatusInternalServerError)
}
