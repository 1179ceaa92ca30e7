package web

import (
	"io/fs"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes is every route the console serves.
func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.withRequestID, s.recoverPanics, s.logRequests, securityHeaders)

	static, _ := fs.Sub(staticFS, "static")
	r.Handle("/static/*", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))

	r.Get("/healthz", s.handleHealthz)
	r.Get("/readyz", s.handleReadyz)
	r.Handle("/metrics", promhttp.HandlerFor(s.deps.Registry, promhttp.HandlerOpts{Registry: s.deps.Registry}))

	r.Get("/", s.handleHome)
	r.NotFound(s.handleNotFound)
	return r
}
