package web

import (
	"io/fs"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/taskgate/taskgate/auth"
)

// routes is every route the console serves, in three groups: public routes, the API for
// applications (an API token), and the console (a signed-in account; every POST carries the
// session's CSRF token). Add a console page to the console group under the role it needs, and
// add its line to routeAccess in matrix_test.go: the role × route matrix test fails on any route
// missing from that table.
func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(s.withRequestID, s.recoverPanics, s.logRequests, securityHeaders, limitBodies, s.bodyDeadline, s.crossOrigin, s.loadSession)

	// Public: no sign-in.
	static, _ := fs.Sub(staticFS, "static")
	r.Handle("/static/*", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	r.Get("/healthz", s.handleHealthz)
	r.Get("/readyz", s.handleReadyz)
	if s.deps.MetricsToken != "" {
		r.Handle("/metrics", s.requireMetricsToken(s.MetricsHandler())) // health.go
	}
	r.Get("/signin", s.handleSignInForm)
	r.Post("/signin", s.handleSignIn)

	// API for applications: an API token bound to tenants. Handlers call s.allowTenant.
	r.Route("/api/v1", func(r chi.Router) {
		r.Use(s.requireToken)
		r.Get("/whoami", s.handleWhoAmI)
		s.mountOperationsAPI(r) // api_operations.go: operations, openapi.json
	})
	// OFREP (killswitch.OFREP): flags for applications' OpenFeature SDKs, by API token.
	r.Post("/ofrep/v1/evaluate/flags", s.handleOFREP)
	r.Post("/ofrep/v1/evaluate/flags/{key}", s.handleOFREP)

	// Console: a signed-in account of any role (viewer and up) unless a group says more.
	// Handlers call s.allowTenant for everything that belongs to a tenant.
	r.Group(func(r chi.Router) {
		r.Use(s.requireSignIn, s.checkCSRF)

		r.Get("/", s.handleHome)
		r.Get("/audit", s.handleAudit)
		r.Get("/servers", s.handleServers)
		r.Get("/servers/{name}/manifests", s.handleManifests)
		r.Get("/workflows", s.handleWorkflows)
		r.Get("/inbox", s.handleInbox)
		r.Get("/operations", s.handleOperations)
		r.Get("/operations/export", s.handleExportOperations)
		r.Get("/operations/{id}", s.handleOperation)
		r.With(s.requireRole(auth.RoleOperator)).Post("/operations/{id}/cancel", s.handleCancelOperationForm)
		r.With(s.requireRole(mayAnswer...)).Post("/operations/{id}/input", s.handleAnswerInputForm)
		r.Get("/reconcile/export", s.handleExportReconcile) // reconcile.go: the queue's filters as CSV or JSON, in scope
		s.mountReconcile(r)                                 // reconcile.go: GET /reconcile, /reconcile/{id}; support: claim, release, resolve, retry, bulk
		r.With(s.requireRole(auth.RoleOperator)).Post("/servers/{name}/probe", s.handleProbeNow)
		r.Get("/gates", s.handleGates)        // gates.go: runs per server and workflow, the repeat queue
		r.Get("/gates/{id}", s.handleGateRun) // gates.go: one run's cases, evidence and deviations
		r.With(s.requireRole(auth.RoleOperator)).Post("/gates/run", s.handleStartGate)
		r.Get("/flags", s.handleFlags) // flags.go: every flag, history, preview, export
		r.Get("/flags/history", s.handleFlagHistory)
		r.Get("/killswitch", s.handleKillSwitch) // killswitch.go: switches and their drain
		r.With(s.requireRole(auth.RoleOperator)).Post("/flags", s.handlePutFlag)
		r.With(s.requireRole(auth.RoleOperator)).Post("/flags/revert", s.handleRevertFlag)
		r.With(s.requireRole(auth.RoleOperator)).Post("/killswitch/engage", s.handleEngage)
		r.With(s.requireRole(auth.RoleOperator)).Post("/killswitch/release", s.handleRelease)
		r.With(s.requireRole(auth.RoleOperator)).Post("/killswitch/approve", s.handleApproveRelease)
		r.Get("/rollouts", s.handleRollouts) // rollouts.go: stages, evidence, canary health, history
		r.With(s.requireRole(auth.RoleOperator)).Post("/rollouts/{workflow}/{action}", s.handleRolloutMove)
		r.Get("/events", s.limitStreams(s.handleEvents)) // limits.go: streams per session and in total
		r.Get(passwordPath, s.handlePasswordForm)        // password.go: change one's own password
		r.Post(passwordPath, s.handleChangePassword)
		r.Post("/signout", s.handleSignOut)

		// Admin: accounts and API tokens.
		r.Group(func(r chi.Router) {
			r.Use(s.requireRole(auth.RoleAdmin))
			r.Get("/admin/accounts", s.handleAccounts)
			r.Post("/admin/accounts", s.handleAddAccount)
			r.Post("/admin/accounts/{id}/disable", s.accountAction("disable"))
			r.Post("/admin/accounts/{id}/enable", s.accountAction("enable"))
			r.Post("/admin/accounts/{id}/reset-password", s.accountAction("reset-password"))
			r.Post("/admin/accounts/{id}/role", s.handleSetRole) // admin.go: role and tenant scope, from the policy's tenants
			r.Get("/admin/tokens", s.handleTokens)
			r.Post("/admin/tokens", s.handleCreateToken)
			r.Post("/admin/tokens/{id}/revoke", s.handleRevokeToken)
		})
	})

	r.NotFound(s.handleNotFound)
	return r
}
