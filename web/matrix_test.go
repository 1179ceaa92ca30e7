package web

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/taskgate/taskgate/auth"
)

// routeAccess is who may use each route: "public" (anyone), a role ("viewer" = every signed-in
// account; see auth.Role.Has) or "token" (an API token). Every route in routes.go must have a
// line here: TestRoleRouteMatrix walks the router and fails on any route missing from it.
var routeAccess = map[string]string{
	"GET /healthz":  "public",
	"GET /readyz":   "public",
	"GET /static/*": "public",
	"GET /signin":   "public",
	"POST /signin":  "public",

	"GET /api/v1/whoami": "token",

	"GET /api/v1/openapi.json":            "token",
	"POST /api/v1/operations":             "token",
	"GET /api/v1/operations":              "token",
	"GET /api/v1/operations/{id}":         "token",
	"POST /api/v1/operations/{id}/cancel": "token",
	"POST /api/v1/operations/{id}/input":  "token",

	"GET /":      "viewer",
	"GET /audit": "viewer",

	"GET /servers":                  "viewer",
	"GET /servers/{name}/manifests": "viewer",
	"GET /workflows":                "viewer",

	"GET /inbox":                   "viewer",
	"GET /operations":              "viewer",
	"GET /operations/export":       "viewer",
	"GET /operations/{id}":         "viewer",
	"POST /operations/{id}/cancel": "operator",
	"POST /operations/{id}/input":  "operator|support",

	"GET /reconcile":                     "viewer",
	"GET /reconcile/export":              "viewer",
	"GET /reconcile/{id}":                "viewer",
	"GET /reconcile/batches/{id}":        "viewer",
	"POST /reconcile/{id}/claim":         "support",
	"POST /reconcile/{id}/release":       "support",
	"POST /reconcile/{id}/resolve":       "support",
	"POST /reconcile/{id}/retry":         "support",
	"POST /reconcile/bulk":               "support",
	"POST /servers/{name}/probe":         "operator",
	"GET /gates":                         "viewer",
	"GET /gates/{id}":                    "viewer",
	"POST /gates/run":                    "operator",
	"GET /rollouts":                      "viewer",
	"POST /rollouts/{workflow}/{action}": "operator",
	"GET /events":                        "viewer",

	"GET /flags":                          "viewer",
	"GET /flags/history":                  "viewer",
	"GET /killswitch":                     "viewer",
	"POST /flags":                         "operator",
	"POST /flags/revert":                  "operator",
	"POST /killswitch/engage":             "operator",
	"POST /killswitch/release":            "operator",
	"POST /killswitch/approve":            "operator",
	"POST /ofrep/v1/evaluate/flags":       "token",
	"POST /ofrep/v1/evaluate/flags/{key}": "token",
	"POST /signout":                       "viewer",
	"GET /account/password":               "viewer",
	"POST /account/password":              "viewer",

	"GET /admin/accounts":                      "admin",
	"POST /admin/accounts":                     "admin",
	"POST /admin/accounts/{id}/disable":        "admin",
	"POST /admin/accounts/{id}/enable":         "admin",
	"POST /admin/accounts/{id}/reset-password": "admin",
	"POST /admin/accounts/{id}/role":           "admin",
	"GET /admin/tokens":                        "admin",
	"POST /admin/tokens":                       "admin",
	"POST /admin/tokens/{id}/revoke":           "admin",
}

// routePaths fills a route pattern's parameters with something that exists in a testEnv.
// Parameters not listed here become "1".
var routePaths = map[string]func(e *testEnv) string{
	"/admin/accounts/{id}/disable": func(e *testEnv) string {
		return "/admin/accounts/" + id(e.users["globex-viewer"].Account.ID) + "/disable"
	},
	"/admin/accounts/{id}/enable": func(e *testEnv) string {
		return "/admin/accounts/" + id(e.users["globex-viewer"].Account.ID) + "/enable"
	},
	"/admin/accounts/{id}/role": func(e *testEnv) string {
		return "/admin/accounts/" + id(e.users["globex-viewer"].Account.ID) + "/role"
	},
	"/admin/accounts/{id}/reset-password": func(e *testEnv) string {
		return "/admin/accounts/" + id(e.users["globex-viewer"].Account.ID) + "/reset-password"
	},
	"/admin/tokens/{id}/revoke": func(e *testEnv) string { return "/admin/tokens/" + id(e.tokenIDs["globex-token"]) + "/revoke" },
	"/static/*":                 func(*testEnv) string { return "/static/app.css" },
	"/servers/{name}/manifests": func(*testEnv) string { return "/servers/demo/manifests" },
	"/servers/{name}/probe":     func(*testEnv) string { return "/servers/demo/probe" },
}

func id(n int64) string { return strconv.FormatInt(n, 10) }

// matrixPrincipals are the callers every route is tried with: anonymous, each role with every
// tenant, and an API token. Admin goes last, since its actions change what the others would see.
var matrixPrincipals = []string{"", "viewer", "operator", "support", "acme-token", "admin"}

// walkRoutes lists "METHOD pattern" for every route the console serves. Routes registered for
// every method (r.Handle) are listed as GET.
func walkRoutes(t testing.TB, s *Server) []string {
	t.Helper()
	seen := map[string]bool{}
	err := chi.Walk(s.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		route = strings.Replace(route, "/*/", "/", -1)
		seen[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for k := range seen {
		method, route, _ := strings.Cut(k, " ")
		if method != http.MethodGet && seen["GET "+route] && seen["POST "+route] && seen["PUT "+route] && seen["DELETE "+route] {
			continue // a Handle route: checked as GET
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRoleRouteMatrix tries every route with every role (and anonymously, and with an API token)
// and checks it is allowed or refused exactly as routeAccess says.
func TestRoleRouteMatrix(t *testing.T) {
	t.Parallel()
	routes := walkRoutes(t, newTestEnv(t).srv)
	if len(routes) < len(routeAccess) {
		t.Errorf("walked %d routes, table has %d: %v", len(routes), len(routeAccess), routes)
	}
	for _, rt := range routes {
		want, ok := routeAccess[rt]
		if !ok {
			t.Errorf("route %q is not in routeAccess: add who may use it to matrix_test.go", rt)
			continue
		}
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			e := newTestEnv(t)
			method, pattern, _ := strings.Cut(rt, " ")
			path := pattern
			if f, ok := routePaths[pattern]; ok {
				path = f(e)
			} else {
				for strings.Contains(path, "{") {
					i, j := strings.Index(path, "{"), strings.Index(path, "}")
					path = path[:i] + "1" + path[j+1:]
				}
			}
			for _, who := range matrixPrincipals {
				req := e.request(t, who, method, path, nil)
				if pattern == "/events" {
					req.Header.Set("Accept", "text/event-stream")
				}
				allowed := expectAllowed(want, who)
				res, body := sendMatrix(t, req, pattern == "/events")
				// A page request is refused by a redirect to the sign-in page, anything else by 401 or 403.
				toSignIn := method == http.MethodGet && res.StatusCode == http.StatusSeeOther &&
					strings.HasPrefix(res.Header.Get("Location"), "/signin")
				refused := res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden || toSignIn
				if want == "public" {
					refused = res.StatusCode == http.StatusUnauthorized || toSignIn
				}
				if refused == allowed {
					t.Errorf("%s as %q: status %d (location %q), want allowed=%v\n%.300s", rt, label(who), res.StatusCode,
						res.Header.Get("Location"), allowed, body)
				}
			}
		})
	}
}

func label(who string) string {
	if who == "" {
		return "anonymous"
	}
	return who
}

// expectAllowed says whether who may use a route with access want.
func expectAllowed(want, who string) bool {
	switch want {
	case "public":
		return true
	case "token":
		return strings.HasSuffix(who, "-token")
	}
	for _, u := range testUsers {
		if u.Label == who {
			for _, role := range strings.Split(want, "|") {
				if u.Role.Has(auth.Role(role)) {
					return true
				}
			}
			return false
		}
	}
	return false
}

// sendMatrix sends req; for an event stream it reads only the status and headers.
func sendMatrix(t testing.TB, req *http.Request, stream bool) (*http.Response, string) {
	t.Helper()
	if !stream {
		return send(t, req)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res, ""
}
