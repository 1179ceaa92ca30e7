package web

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
)

func TestStateChangeWithoutCSRFTokenOrFromAnotherOriginRefused(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	admin := e.users["admin"]
	cases := map[string]func(*http.Request){
		"no token":         func(r *http.Request) {},
		"wrong token":      func(r *http.Request) {},
		"another origin":   func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") },
		"cross-site fetch": func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") },
	}
	for name, mutate := range cases {
		form := url.Values{"name": {"app-" + strings.ReplaceAll(name, " ", "-")}, "tenants": {"acme"}}
		switch name {
		case "no token":
			form.Set(csrfField, "")
		case "wrong token":
			form.Set(csrfField, "not-the-session-token")
		default:
			form.Set(csrfField, admin.Session.CSRF)
		}
		req := e.request(t, "admin", http.MethodPost, "/admin/tokens", form)
		mutate(req)
		res, _ := send(t, req)
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("%s: status %d, want 403", name, res.StatusCode)
		}
	}
	toks, err := e.auth.Tokens(context.Background(), auth.AllTenants)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 2 {
		t.Errorf("a refused request created a token: %d tokens", len(toks))
	}
	// Sign-out is a state change too: without the token the session survives.
	res, _ := e.do(t, "viewer", http.MethodPost, "/signout", url.Values{csrfField: {""}})
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("sign-out without CSRF token: status %d, want 403", res.StatusCode)
	}
	if _, err := e.auth.Session(context.Background(), e.users["viewer"].Session.Token); err != nil {
		t.Errorf("session ended by a forged sign-out: %v", err)
	}
	// The same request with the token and from the same origin works.
	req := e.request(t, "admin", http.MethodPost, "/admin/tokens", url.Values{"name": {"ok-app"}, "tenants": {"acme"}})
	req.Header.Set("Origin", e.URL)
	if res, body := send(t, req); res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="secret"`) {
		t.Errorf("valid request: status %d, want 200 with the secret", res.StatusCode)
	}
	// The sign-in form is protected before there is a session.
	res, _ = e.do(t, "", http.MethodPost, "/signin", url.Values{"email": {"admin@test"}, "password": {admin.Password}})
	if res.StatusCode != http.StatusForbidden || len(res.Cookies()) == 0 || hasSessionCookie(res) {
		t.Errorf("sign-in without its form token: status %d, want 403 and no session", res.StatusCode)
	}
}

func hasSessionCookie(res *http.Response) bool {
	for _, c := range res.Cookies() {
		if c.Name == SessionCookie && c.Value != "" {
			return true
		}
	}
	return false
}

// TestCrossTenantRefused: a principal bound to acme can neither see nor act on anything of globex,
// through any console route or the API.
func TestCrossTenantRefused(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	globex := e.users["globex-viewer"].Account
	gid := id(globex.ID)
	globexTok := id(e.tokenIDs["globex-token"])

	// Reads: lists hide what is out of scope.
	_, body := e.do(t, "acme-admin", http.MethodGet, "/admin/accounts", nil)
	if strings.Contains(body, "globex-viewer@test") || strings.Contains(body, `data-testid="account-admin@test"`) {
		t.Error("a scoped admin's account list shows accounts outside its scope")
	}
	if !strings.Contains(body, "acme-viewer@test") {
		t.Error("a scoped admin's account list lacks the accounts within its scope")
	}
	_, body = e.do(t, "acme-admin", http.MethodGet, "/admin/tokens", nil)
	if strings.Contains(body, "globex-app") || !strings.Contains(body, "acme-app") {
		t.Error("a scoped admin's token list is not filtered by scope")
	}
	res, _ := e.do(t, "acme-viewer", http.MethodGet, "/audit?tenant=globex", nil)
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("audit filtered to another tenant: status %d, want 404", res.StatusCode)
	}
	_, body = e.do(t, "acme-viewer", http.MethodGet, "/audit", nil)
	if strings.Contains(body, "globex") || !strings.Contains(body, "acme-viewer@test") {
		t.Error("a scoped viewer's audit page shows other tenants' rows or lacks its own")
	}
	res, body = e.do(t, "acme-token", http.MethodGet, "/api/v1/whoami", nil)
	var who struct{ Tenants []string }
	if err := json.Unmarshal([]byte(body), &who); err != nil || res.StatusCode != http.StatusOK ||
		len(who.Tenants) != 1 || who.Tenants[0] != "acme" {
		t.Errorf("API token scope: status %d body %s", res.StatusCode, body)
	}

	// Actions: every one refused, nothing changed.
	// Actions on another tenant's id answer 404 like a missing id, so ids cannot be probed;
	// granting a tenant outside the scope answers 403.
	actions := []struct {
		path string
		form url.Values
		want int
	}{
		{"/admin/accounts/" + gid + "/disable", nil, http.StatusNotFound},
		{"/admin/accounts/" + gid + "/reset-password", nil, http.StatusNotFound},
		{"/admin/accounts/" + gid + "/enable", nil, http.StatusNotFound},
		{"/admin/accounts/987654321/disable", nil, http.StatusNotFound},
		{"/admin/accounts", url.Values{"email": {"x@test"}, "role": {"viewer"}, "tenants": {"globex"}}, http.StatusForbidden},
		{"/admin/accounts", url.Values{"email": {"y@test"}, "role": {"viewer"}, "tenants": {"all"}}, http.StatusForbidden},
		{"/admin/accounts", url.Values{"email": {"z@test"}, "role": {"viewer"}, "tenants": {"acme,globex"}}, http.StatusForbidden},
		{"/admin/tokens", url.Values{"name": {"sneaky"}, "tenants": {"globex"}}, http.StatusForbidden},
		{"/admin/tokens/" + globexTok + "/revoke", nil, http.StatusNotFound},
		{"/admin/tokens/987654321/revoke", nil, http.StatusNotFound},
		{"/admin/accounts/" + id(e.users["admin"].Account.ID) + "/reset-password", nil, http.StatusNotFound},
	}
	before := len(e.auditRows(t))
	for _, a := range actions {
		res, _ := e.do(t, "acme-admin", http.MethodPost, a.path, a.form)
		if res.StatusCode != a.want {
			t.Errorf("POST %s %v as acme-admin: status %d, want %d", a.path, a.form, res.StatusCode, a.want)
		}
	}
	if after := len(e.auditRows(t)); after != before {
		t.Errorf("refused actions left %d audit rows", after-before)
	}
	if a, _ := e.auth.Account(ctx, globex.ID); a.Disabled {
		t.Error("a cross-tenant disable took effect")
	}
	if _, err := e.auth.Session(ctx, e.users["globex-viewer"].Session.Token); err != nil {
		t.Error("a cross-tenant reset ended the account's session")
	}
	if _, err := e.auth.Authenticate(ctx, e.tokens["globex-token"]); err != nil {
		t.Error("a cross-tenant revoke took effect")
	}
}

// TestEventsStayInScope: the live-update stream tells an acme viewer of acme changes only.
func TestEventsStayInScope(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	req := e.request(t, "acme-viewer", http.MethodGet, "/events", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && sc.Text() != ": connected" {
	}
	e.srv.Publish(audit.Change{Area: "globexthing", Tenant: "globex"})
	e.srv.Publish(audit.Change{Area: "everything", Tenant: ""})
	e.srv.Publish(audit.Change{Area: "acmething", Tenant: "acme"})
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "data: ") {
			if !strings.Contains(line, "acmething") {
				t.Fatalf("acme viewer got %q", line)
			}
			return
		}
	}
	t.Fatalf("stream ended: %v", sc.Err())
}

// TestEveryActionLeavesItsAuditRow performs each console action over HTTP and finds its audit
// row by the response's request id, with the actor, role, target and change.
func TestEveryActionLeavesItsAuditRow(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	target := id(e.users["globex-viewer"].Account.ID)
	steps := []struct {
		path, action string
		form         url.Values
		check        func(audit.Row) bool
	}{
		{"/admin/accounts", "account.create", url.Values{"email": {"new@test"}, "role": {"operator"}, "tenants": {"acme"}},
			func(r audit.Row) bool {
				return r.Tenant == "acme" && strings.Contains(string(r.After), `"role":"operator"`) && !strings.Contains(string(r.After), "argon2")
			}},
		{"/admin/accounts/" + target + "/disable", "account.disable", nil,
			func(r audit.Row) bool {
				return strings.Contains(string(r.Before), `"disabled":false`) && strings.Contains(string(r.After), `"disabled":true`)
			}},
		{"/admin/accounts/" + target + "/enable", "account.enable", nil,
			func(r audit.Row) bool { return strings.Contains(string(r.After), `"disabled":false`) }},
		{"/admin/accounts/" + target + "/reset-password", "account.reset_password", nil,
			func(r audit.Row) bool {
				return r.Target == "account:"+target+" globex-viewer@test" && r.Tenant == "globex"
			}},
		{"/admin/tokens", "token.create", url.Values{"name": {"billing"}, "tenants": {"acme"}},
			func(r audit.Row) bool { return strings.Contains(string(r.After), `"name":"billing"`) }},
		{"/admin/tokens/" + id(e.tokenIDs["acme-token"]) + "/revoke", "token.revoke", nil,
			func(r audit.Row) bool { return strings.Contains(string(r.After), `"revoked":true`) }},
		{"/signout", "auth.signout", nil, func(r audit.Row) bool { return true }},
	}
	for _, s := range steps {
		res, body := e.do(t, "admin", http.MethodPost, s.path, s.form)
		if res.StatusCode >= 400 {
			t.Fatalf("POST %s: status %d\n%.400s", s.path, res.StatusCode, body)
		}
		row := e.findAudit(t, s.action, res.Header.Get("X-Request-ID"))
		row.Before = json.RawMessage(strings.ReplaceAll(string(row.Before), " ", ""))
		row.After = json.RawMessage(strings.ReplaceAll(string(row.After), " ", ""))
		if row.Actor != "admin@test" || row.ActorKind != audit.KindAccount || row.Role != "admin" || !s.check(row) {
			t.Errorf("%s: audit row %+v (before %s after %s)", s.action, row, row.Before, row.After)
		}
		for _, secret := range []string{e.users["admin"].Password, e.tokens["acme-token"]} {
			if strings.Contains(string(row.After)+string(row.Before)+row.Target, secret) {
				t.Errorf("%s: the audit row holds a secret", s.action)
			}
		}
	}
	// Sign-in through the form, with its pre-session token.
	res := signIn(t, e, "viewer@test", e.users["viewer"].Password)
	if res.StatusCode != http.StatusSeeOther || !hasSessionCookie(res) {
		t.Fatalf("sign-in: status %d", res.StatusCode)
	}
	e.findAudit(t, "auth.signin", res.Header.Get("X-Request-ID"))
}

// signIn fetches the sign-in form and posts it, as a browser would.
func signIn(t testing.TB, e *testEnv, email, password string) *http.Response {
	t.Helper()
	res, body := e.do(t, "", http.MethodGet, "/signin", nil)
	var tok string
	for _, c := range res.Cookies() {
		if c.Name == signinCookie {
			tok = c.Value
		}
	}
	if tok == "" || !strings.Contains(body, tok) {
		t.Fatal("sign-in form lacks its anti-forgery token")
	}
	req := e.request(t, "", http.MethodPost, "/signin", url.Values{"email": {email}, "password": {password}, csrfField: {tok}, "next": {"/audit"}})
	req.AddCookie(&http.Cookie{Name: signinCookie, Value: tok})
	res, body = send(t, req)
	res.Body = io.NopCloser(strings.NewReader(body)) // read again by callers that look at the page
	return res
}

func TestSignInFailuresSayNothingAboutAccounts(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	// A wrong password for a real account and any password for no account: the same answer.
	var answers []string
	for _, email := range []string{"viewer@test", "nobody@test"} {
		res, _ := e.do(t, "", http.MethodGet, "/signin", nil)
		tok := res.Cookies()[0].Value
		req := e.request(t, "", http.MethodPost, "/signin", url.Values{"email": {email}, "password": {"wrong"}, csrfField: {tok}})
		req.AddCookie(&http.Cookie{Name: signinCookie, Value: tok})
		res, body := send(t, req)
		if res.StatusCode != http.StatusUnauthorized || hasSessionCookie(res) {
			t.Fatalf("%s: status %d", email, res.StatusCode)
		}
		i := strings.Index(body, `data-testid="signin-error">`)
		if i < 0 {
			t.Fatalf("%s: no error shown", email)
		}
		answers = append(answers, body[i:i+200])
	}
	if answers[0] != answers[1] {
		t.Errorf("answers differ:\n%s\n%s", answers[0], answers[1])
	}
	// Repeated failures make that address wait (429) for real and unknown accounts alike;
	// nothing is locked for everyone (see TestAttackerDoesNotLockOutOwner).
	for _, email := range []string{"operator@test", "ghost@test"} {
		for range 3 {
			if res := signIn(t, e, email, "wrong"); res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%s: status %d", email, res.StatusCode)
			}
		}
		if res := signIn(t, e, email, "wrong"); res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
			t.Errorf("%s after three failures: status %d, want 429 with Retry-After", email, res.StatusCode)
		}
	}
	// A reset by an admin lifts the wait; the owner first hears of the failures, then must
	// change the printed password.
	_, pw, err := e.auth.ResetPassword(context.Background(), audit.Actor{Name: "t", Kind: audit.KindSystem}, auth.AllTenants,
		e.users["operator"].Account.ID)
	if err != nil {
		t.Fatal(err)
	}
	res := signIn(t, e, "operator@test", pw)
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(b), `data-testid="failed-signins"`) ||
		!strings.Contains(string(b), `href="`+passwordPath+`?next=%2Faudit"`) {
		t.Errorf("after reset: status %d, want the failed sign-ins notice leading to the password page", res.StatusCode)
	}
}

func TestTrustedProxyHeaderOnlyFromProxies(t *testing.T) {
	t.Parallel()
	proxy := func(prefix string) envOption {
		return func(d *Deps) {
			d.TrustedProxy = TrustedProxy{Header: "X-Forwarded-Email", Proxies: []netip.Prefix{netip.MustParsePrefix(prefix)}}
		}
	}
	trusted := newTestEnv(t, proxy("127.0.0.0/8"))
	req := trusted.request(t, "", http.MethodGet, "/", nil)
	req.Header.Set("X-Forwarded-Email", "support@test")
	res, body := send(t, req)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="who-name">support@test`) || !hasSessionCookie(res) {
		t.Errorf("from the proxy: status %d", res.StatusCode)
	}
	req = trusted.request(t, "", http.MethodGet, "/", nil)
	req.Header.Set("X-Forwarded-Email", "stranger@test")
	if res, _ := send(t, req); res.StatusCode != http.StatusForbidden {
		t.Errorf("unknown account from the proxy: status %d, want 403", res.StatusCode)
	}

	untrusted := newTestEnv(t, proxy("10.0.0.0/8"))
	req = untrusted.request(t, "", http.MethodGet, "/", nil)
	req.Header.Set("X-Forwarded-Email", "admin@test")
	if res, _ := send(t, req); res.StatusCode != http.StatusSeeOther || hasSessionCookie(res) {
		t.Errorf("header from a non-proxy address: status %d, want a redirect to sign in", res.StatusCode)
	}
}

func TestSecurityHeadersAndCookies(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	res, _ := e.do(t, "viewer", http.MethodGet, "/", nil)
	csp := res.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP %q", csp)
	}
	if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Referrer-Policy") == "" {
		t.Error("missing nosniff or Referrer-Policy")
	}
	res = signIn(t, e, "admin@test", e.users["admin"].Password)
	for _, c := range res.Cookies() {
		if c.Name == SessionCookie && (!c.HttpOnly || c.SameSite != http.SameSiteLaxMode) {
			t.Errorf("session cookie %+v: want HttpOnly and SameSite=Lax", c)
		}
	}
	// Disabling an account ends its sessions at once.
	res, _ = e.do(t, "admin", http.MethodPost, "/admin/accounts/"+id(e.users["viewer"].Account.ID)+"/disable", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("disable: %d", res.StatusCode)
	}
	if res, _ := e.do(t, "viewer", http.MethodGet, "/", nil); res.StatusCode != http.StatusSeeOther {
		t.Errorf("disabled account's session still works: %d", res.StatusCode)
	}
	// A revoked token stops working at once.
	e.do(t, "admin", http.MethodPost, "/admin/tokens/"+id(e.tokenIDs["acme-token"])+"/revoke", nil)
	if res, _ := e.do(t, "acme-token", http.MethodGet, "/api/v1/whoami", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("revoked token: status %d, want 401", res.StatusCode)
	}
}

// TestEventsFollowANarrowedScope: an open live-update stream applies a scope narrowed after it
// opened, at its next session check, instead of keeping the scope it started with.
func TestEventsFollowANarrowedScope(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(d *Deps) { d.StreamCheck = 20 * time.Millisecond })
	req := e.request(t, "viewer", http.MethodGet, "/events", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() && sc.Text() != ": connected" {
	}
	u := e.users["viewer"].Account
	if _, err := e.auth.SetRole(ctx, audit.Actor{Name: "test", Kind: audit.KindSystem}, auth.AllTenants, u.ID, u.Role, auth.TenantScope("globex")); err != nil {
		t.Fatal(err)
	}
	// Two keep-alives: the second is sent after a session check that saw the new scope.
	for seen := 0; seen < 2 && sc.Scan(); {
		if sc.Text() == ": keep-alive" {
			seen++
		}
	}
	e.srv.Publish(audit.Change{Area: "acmething", Tenant: "acme"})
	e.srv.Publish(audit.Change{Area: "globexthing", Tenant: "globex"})
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: ") {
			if !strings.Contains(line, "globexthing") {
				t.Fatalf("stream narrowed to globex passed on %q", line)
			}
			return
		}
	}
	t.Fatalf("stream ended: %v", sc.Err())
}
