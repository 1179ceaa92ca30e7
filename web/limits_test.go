package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
)

// A body sent one byte at a time is cut off when the body read timeout runs out, instead of
// holding the connection open for as long as the sender likes.
func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(d *Deps) { d.BodyReadTimeout = 500 * time.Millisecond })
	u, _ := url.Parse(e.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /signin HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\n", u.Host)
	start := time.Now()
	closed := make(chan time.Duration, 1)
	go func() {
		_, _ = io.Copy(io.Discard, conn) // the answer, then the server closing the connection
		closed <- time.Since(start)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case d := <-closed:
			t.Logf("a trickling body was cut after %s", d.Round(time.Millisecond))
			return
		case <-tick.C:
			_, _ = conn.Write([]byte("a")) // errors once the server has closed
		case <-deadline:
			t.Fatal("a body trickling one byte every 100 ms was still being read after 10 s (timeout 500 ms)")
		}
	}
}

// openStream opens a live-update stream as who and returns its status and a closer.
func openStream(t *testing.T, e *testEnv, who string) (int, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req := e.request(t, who, http.MethodGet, "/events", nil).WithContext(ctx)
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode == http.StatusOK {
		if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil { // the stream is open
			t.Fatal(err)
		}
	}
	return res.StatusCode, func() { cancel(); res.Body.Close() }
}

// Live-update streams are capped per session and in total; past a cap the answer is 429, and a
// closed stream frees its place.
func TestStreamCapAnswers429(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(d *Deps) { d.StreamsPerSession, d.StreamsTotal = 2, 3 })
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i, c := range []struct {
		who  string
		want int
	}{{"viewer", 200}, {"viewer", 200}, {"viewer", 429}, {"operator", 200}, {"admin", 429}} {
		got, closeIt := openStream(t, e, c.who)
		closers = append(closers, closeIt)
		if got != c.want {
			t.Errorf("stream %d as %s: status %d, want %d", i, c.who, got, c.want)
		}
	}
	closers[0]()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, closeIt := openStream(t, e, "admin")
		closers = append(closers, closeIt)
		if got == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a stream closed a new one still gets %d", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Anonymous callers learn only the state from /readyz, never the database's address or user;
// a signed-in admin gets the reason.
func TestAnonymousReadyzCarriesNoDetails(t *testing.T) {
	t.Parallel()
	const reason = `database unreachable: failed to connect to user=taskgate database=taskgate: /var/run/postgresql/.s.PGSQL.5432`
	e := newTestEnv(t, func(d *Deps) {
		d.Ready = ReadinessFunc(func(context.Context) error { return errors.New(reason) })
	})
	for _, c := range []struct {
		who    string
		reason bool
	}{{"", false}, {"viewer", false}, {"admin", true}} {
		res, body := e.do(t, c.who, http.MethodGet, "/readyz", nil)
		if res.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, `"unavailable"`) {
			t.Errorf("%s: status %d body %s", label(c.who), res.StatusCode, body)
		}
		if got := strings.Contains(body, "postgresql") || strings.Contains(body, "user="); got != c.reason {
			t.Errorf("%s: reason shown %v, want %v: %s", label(c.who), got, c.reason, body)
		}
	}
}

// /metrics is not on the console's address for anonymous callers: only behind the metrics
// token, or on the separate handler; its method label stays bounded whatever methods arrive.
func TestMetricsNotAnonymousAndBounded(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	if res, _ := e.do(t, "", http.MethodGet, "/metrics", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("anonymous /metrics without a token configured: status %d, want 404", res.StatusCode)
	}
	for i := range 5 {
		req := e.request(t, "", fmt.Sprintf("INVENTED%d", i), "/healthz", nil)
		send(t, req)
	}
	rec := httptest.NewRecorder()
	e.srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	if strings.Contains(body, "INVENTED") || !strings.Contains(body, `method="other"`) {
		t.Errorf("invented methods became labels:\n%s", body)
	}
	series := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "taskgate_http_requests_total{") {
			series++
		}
	}
	if series > 4 {
		t.Errorf("%d request series after five invented methods", series)
	}

	tok := newTestEnv(t, func(d *Deps) { d.MetricsToken = "s3cret-metrics-token" })
	if res, _ := tok.do(t, "", http.MethodGet, "/metrics", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics without the token: status %d, want 401", res.StatusCode)
	}
	if res, _ := tok.do(t, "admin", http.MethodGet, "/metrics", nil); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("/metrics with a session but no token: status %d, want 401", res.StatusCode)
	}
	req := tok.request(t, "", http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret-metrics-token")
	if res, body := send(t, req); res.StatusCode != http.StatusOK || !strings.Contains(body, "taskgate_http_requests_total") {
		t.Errorf("/metrics with the token: status %d", res.StatusCode)
	}
}

func sessionCookieOf(res *http.Response) *http.Cookie {
	for _, c := range res.Cookies() {
		if c.Name == SessionCookie && c.Value != "" {
			return c
		}
	}
	return nil
}

// Behind a trusted TLS-terminating proxy the session cookie is Secure; the same header from
// anyone else changes nothing; the setting makes it Secure everywhere.
func TestSessionCookieSecureBehindTLSProxy(t *testing.T) {
	t.Parallel()
	proxies := func(prefix string) envOption {
		return func(d *Deps) { d.TrustedProxy.Proxies = []netip.Prefix{netip.MustParsePrefix(prefix)} }
	}
	signInVia := func(e *testEnv, proto string) *http.Cookie {
		res, _ := e.do(t, "", http.MethodGet, "/signin", nil)
		tok := res.Cookies()[0].Value
		req := e.request(t, "", http.MethodPost, "/signin", url.Values{"email": {"admin@test"}, "password": {e.users["admin"].Password}, csrfField: {tok}})
		req.AddCookie(&http.Cookie{Name: signinCookie, Value: tok})
		if proto != "" {
			req.Header.Set("X-Forwarded-Proto", proto)
		}
		res, _ = send(t, req)
		c := sessionCookieOf(res)
		if c == nil {
			t.Fatalf("no session cookie: status %d", res.StatusCode)
		}
		return c
	}
	trusted := newTestEnv(t, proxies("127.0.0.0/8"))
	if c := signInVia(trusted, "https"); !c.Secure {
		t.Error("behind a trusted proxy saying https: the session cookie is not Secure")
	}
	if c := signInVia(trusted, ""); c.Secure {
		t.Error("plain HTTP from the proxy: the cookie is Secure (a browser would drop it)")
	}
	if c := signInVia(newTestEnv(t, proxies("10.0.0.0/8")), "https"); c.Secure {
		t.Error("X-Forwarded-Proto from an untrusted address was believed")
	}
	if c := signInVia(newTestEnv(t, func(d *Deps) { d.SecureCookies = true }), ""); !c.Secure {
		t.Error("SecureCookies set: the cookie is not Secure")
	}
}

// signInFrom signs in as a browser behind the proxy at forwarded.
func signInFrom(t *testing.T, e *testEnv, email, password, forwarded string) *http.Response {
	t.Helper()
	res, _ := e.do(t, "", http.MethodGet, "/signin", nil)
	tok := res.Cookies()[0].Value
	req := e.request(t, "", http.MethodPost, "/signin", url.Values{"email": {email}, "password": {password}, csrfField: {tok}})
	req.AddCookie(&http.Cookie{Name: signinCookie, Value: tok})
	req.Header.Set("X-Forwarded-For", forwarded)
	res, body := send(t, req)
	res.Body = io.NopCloser(strings.NewReader(body))
	return res
}

// Behind a trusted proxy the forwarded client address is the throttling key: an attacker's
// failures delay the attacker, while the owner signing in from another address gets in and is
// told of the failures. From an untrusted peer X-Forwarded-For is ignored.
func TestAttackerDoesNotLockOutOwner(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, func(d *Deps) { d.TrustedProxy.Proxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} })
	for range 6 {
		signInFrom(t, e, "admin@test", "guess", "203.0.113.9, 127.0.0.1")
	}
	if res := signInFrom(t, e, "admin@test", "guess", "203.0.113.9"); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the attacker after its failures: status %d, want 429", res.StatusCode)
	}
	res := signInFrom(t, e, "admin@test", e.users["admin"].Password, "198.51.100.7")
	if res.StatusCode != http.StatusOK || sessionCookieOf(res) == nil {
		t.Fatalf("the owner from another address: status %d, want the failed sign-ins notice and a session", res.StatusCode)
	}
	if body, _ := io.ReadAll(res.Body); !strings.Contains(string(body), "203.0.113.9") {
		t.Error("the owner is not told where the failed sign-ins came from")
	}
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE action = 'auth.signin_throttled'`).Scan(&n); err != nil || n != 1 {
		t.Errorf("throttling audit rows: %d %v", n, err)
	}

	u := newTestEnv(t, func(d *Deps) { d.TrustedProxy.Proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
	for range 3 {
		signInFrom(t, u, "admin@test", "guess", "203.0.113.9")
	}
	// All of these come from the same peer, so the "other" forwarded address waits too.
	if res := signInFrom(t, u, "admin@test", "guess", "198.51.100.7"); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a forwarded address from an untrusted peer was believed: status %d", res.StatusCode)
	}
}

// A printed password leads to the password page and nowhere else until it is changed; the
// change ends the account's other sessions.
func TestPrintedPasswordMustBeChangedFirst(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	a, pw, err := e.auth.CreateAccount(ctx, audit.Actor{Name: "t", Kind: audit.KindCLI}, auth.AllTenants,
		auth.NewAccount{Email: "new@test", Role: auth.RoleOperator, Scope: auth.AllTenants})
	if err != nil {
		t.Fatal(err)
	}
	other, err := e.auth.CreateSession(ctx, a.ID, "auth.signin", "")
	if err != nil {
		t.Fatal(err)
	}
	res := signIn(t, e, "new@test", pw)
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != passwordPath+"?next=%2Faudit" {
		t.Fatalf("sign-in with a printed password: %d %q", res.StatusCode, loc)
	}
	c := sessionCookieOf(res)
	sess, err := e.auth.Session(ctx, c.Value)
	if err != nil {
		t.Fatal(err)
	}
	e.users["new"] = testUser{Account: a, Password: pw, Session: sess}
	if res, _ := e.do(t, "new", http.MethodGet, "/audit", nil); res.StatusCode != http.StatusSeeOther ||
		!strings.HasPrefix(res.Header.Get("Location"), passwordPath) {
		t.Errorf("a page before the change: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	if res, _ := e.do(t, "new", http.MethodPost, "/servers/demo/probe", nil); res.StatusCode != http.StatusForbidden {
		t.Errorf("an action before the change: %d, want 403", res.StatusCode)
	}
	res, body := e.do(t, "new", http.MethodGet, passwordPath, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(body, `data-testid="password-required"`) {
		t.Errorf("password page: %d", res.StatusCode)
	}
	res, body = e.do(t, "new", http.MethodPost, passwordPath, url.Values{"current": {pw}, "new": {"long enough pass"}, "confirm": {"long enough pasz"}})
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "differ") {
		t.Errorf("mismatched confirmation: %d", res.StatusCode)
	}
	res, _ = e.do(t, "new", http.MethodPost, passwordPath, url.Values{"current": {pw}, "new": {"long enough pass"}, "confirm": {"long enough pass"},
		"next": {"/audit"}})
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/audit" {
		t.Fatalf("change: %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	if res, _ := e.do(t, "new", http.MethodGet, "/audit", nil); res.StatusCode != http.StatusOK {
		t.Errorf("after the change: %d", res.StatusCode)
	}
	if _, err := e.auth.Session(ctx, other.Token); !errors.Is(err, auth.ErrNoSession) {
		t.Errorf("the other session survived the change: %v", err)
	}
	// Everyone can change their own password.
	res, _ = e.do(t, "viewer", http.MethodPost, passwordPath, url.Values{"current": {e.users["viewer"].Password},
		"new": {"viewer's own password"}, "confirm": {"viewer's own password"}})
	if res.StatusCode != http.StatusSeeOther {
		t.Errorf("a viewer changing its password: %d", res.StatusCode)
	}
}

// A request whose body arrived in time keeps its context while the handler works on past the
// body read timeout.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	t.Parallel()
	s := &Server{deps: Deps{Now: time.Now, BodyReadTimeout: 200 * time.Millisecond}}
	ts := httptest.NewServer(s.bodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(700 * time.Millisecond):
			_, _ = w.Write([]byte("done"))
		case <-r.Context().Done():
			t.Error("the request's context ended after its body was read: the body deadline outlived the body")
		}
	})))
	defer ts.Close()
	res, err := http.Post(ts.URL, "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, _ := io.ReadAll(res.Body); string(b) != "done" {
		t.Errorf("answer %q", b)
	}
}
