package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/examples"
	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/reconcile"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testUser is an account of the test console with an open session.
type testUser struct {
	Account  auth.Account
	Password string
	Session  auth.Session
}

// testEnv is a console on real HTTP over loopback, on its own database, with one signed-in
// account per role and some tenant-scoped ones. Pages added by others test through it:
//
//	e := newTestEnv(t)
//	res := e.do(t, "operator", "POST", "/flags/x", url.Values{"on": {"1"}})
type testEnv struct {
	pool  *pgxpool.Pool
	auth  *auth.Store
	audit *audit.Store
	srv   *Server
	http  *httptest.Server
	// URL is the console's base URL.
	URL string
	// flags is the flag service withRollout gives the console (nil before).
	flags *killswitch.Service
	// users by label: viewer, operator, support, admin (all tenants); acme-viewer, acme-admin,
	// globex-viewer (one tenant each).
	users map[string]testUser
	// tokens by label: acme-token, globex-token (secrets).
	tokens   map[string]string
	tokenIDs map[string]int64
}

// testUsers are the accounts every testEnv has.
var testUsers = []struct {
	Label string
	Role  auth.Role
	Scope auth.Scope
}{
	{"viewer", auth.RoleViewer, auth.AllTenants},
	{"operator", auth.RoleOperator, auth.AllTenants},
	{"support", auth.RoleSupport, auth.AllTenants},
	{"admin", auth.RoleAdmin, auth.AllTenants},
	{"acme-viewer", auth.RoleViewer, auth.TenantScope("acme")},
	{"acme-admin", auth.RoleAdmin, auth.TenantScope("acme")},
	{"globex-viewer", auth.RoleViewer, auth.TenantScope("globex")},
}

type envOption func(*Deps)

func newTestEnv(t testing.TB, opts ...envOption) *testEnv {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.New(t)
	policy, err := config.Parse(examples.Policy)
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{pool: pool, auth: auth.NewStore(pool, auth.Options{Hash: auth.TestHashParams}), audit: audit.NewStore(pool),
		users: map[string]testUser{}, tokens: map[string]string{}, tokenIDs: map[string]int64{}}
	deps := Deps{Ready: ReadinessFunc(func(context.Context) error { return nil }), Policy: policy, Version: "test",
		Auth: e.auth, Audit: e.audit, Reconcile: reconcile.NewStore(pool, reconcile.Options{ResolutionReasons: policy.ResolutionReasons}),
		Gates: gates.NewStore(pool)}
	for _, o := range opts {
		o(&deps)
	}
	if e.srv, err = NewServer(deps); err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewServer(e.srv)
	t.Cleanup(e.http.Close)
	t.Cleanup(e.srv.CloseStreams)
	e.URL = e.http.URL
	sys := audit.Actor{Name: "test", Kind: audit.KindSystem}
	for _, u := range testUsers {
		a, pw, err := e.auth.CreateAccount(ctx, sys, auth.AllTenants, auth.NewAccount{Email: u.Label + "@test", Role: u.Role, Scope: u.Scope})
		if err != nil {
			t.Fatal(err)
		}
		sess, err := e.auth.CreateSession(ctx, a.ID, "auth.signin", "")
		if err != nil {
			t.Fatal(err)
		}
		e.users[u.Label] = testUser{Account: a, Password: pw, Session: sess}
	}
	// The test accounts sign in with their printed passwords without changing them first.
	if _, err := pool.Exec(ctx, `UPDATE accounts SET must_change_password = false`); err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "globex"} {
		tok, secret, err := e.auth.CreateToken(ctx, sys, auth.AllTenants, tenant+"-app", auth.TenantScope(tenant))
		if err != nil {
			t.Fatal(err)
		}
		e.tokens[tenant+"-token"], e.tokenIDs[tenant+"-token"] = secret, tok.ID
	}
	return e
}

// request builds a request as who: "" is anonymous, a user label signs in with that user's
// session (and adds its CSRF token to POST forms), a token label presents that API token.
func (e *testEnv) request(t testing.TB, who, method, path string, form url.Values) *http.Request {
	t.Helper()
	var body io.Reader
	if form != nil || method == http.MethodPost {
		if form == nil {
			form = url.Values{}
		}
		if u, ok := e.users[who]; ok && !form.Has(csrfField) {
			form.Set(csrfField, u.Session.CSRF)
		}
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if u, ok := e.users[who]; ok {
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: u.Session.Token})
	}
	if tok, ok := e.tokens[who]; ok {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req
}

// send sends req without following redirects and returns the response with its body read.
func send(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// do sends one request as who (see request) and returns the response and its body.
func (e *testEnv) do(t testing.TB, who, method, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	return send(t, e.request(t, who, method, path, form))
}

// auditRows returns every audit row, newest first.
func (e *testEnv) auditRows(t testing.TB) []audit.Row {
	t.Helper()
	p, err := e.audit.List(context.Background(), audit.Filter{AllTenants: true, Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	return p.Rows
}

// findAudit returns the audit row of action with the request id, failing the test when none.
func (e *testEnv) findAudit(t testing.TB, action, requestID string) audit.Row {
	t.Helper()
	for _, r := range e.auditRows(t) {
		if r.Action == action && r.RequestID == requestID {
			return r
		}
	}
	t.Fatalf("no audit row %s for request %q", action, requestID)
	return audit.Row{}
}
