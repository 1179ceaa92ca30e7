package web

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/taskgate/taskgate/auth"
)

// handleHealthz answers 200 while the process is up.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

// handleReadyz answers 200 when the database is reachable and its schema current, and 503
// otherwise. Why it is not ready goes to the log, and to a signed-in admin in the answer;
// anyone else gets the state only (the reason can name the database's host, socket or user).
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := s.deps.Ready.Ready(ctx); err != nil {
		s.deps.Logger.WarnContext(r.Context(), "not ready", "err", err, "request_id", requestID(r.Context()))
		body := map[string]string{"status": "unavailable"}
		if principal(r).Can(auth.RoleAdmin) {
			body["reason"] = err.Error()
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(body)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "ready"})
}

// MetricsHandler serves the registry's metrics. The console's own address serves it only
// behind Deps.MetricsToken; run it on a listen address of its own (loopback by default).
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.deps.Registry, promhttp.HandlerOpts{Registry: s.deps.Registry})
}

// requireMetricsToken admits only callers presenting Deps.MetricsToken as a bearer token.
func (s *Server) requireMetricsToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(s.deps.MetricsToken)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskgate-metrics"`)
			http.Error(w, "a metrics token is required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
