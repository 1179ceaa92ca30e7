package web

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
)

// newBareServer builds a server with only what the public endpoints need.
func newBareServer(t testing.TB, ready func(context.Context) error) *Server {
	t.Helper()
	// Public endpoints never touch the account stores, so they run without a database.
	s, err := NewServer(Deps{Logger: slog.New(slog.DiscardHandler), Ready: ReadinessFunc(ready), Version: "test",
		Auth: auth.NewStore(nil, auth.Options{Hash: auth.TestHashParams}), Audit: audit.NewStore(nil)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestReadyzReportsReason(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	s := newBareServer(t, func(context.Context) error {
		if down.Load() {
			return errors.New("database unreachable: connection refused")
		}
		return nil
	})
	ts := httptest.NewServer(s)
	defer ts.Close()
	get := func() (int, string) {
		res, err := http.Get(ts.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(); code != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("ready: %d %s", code, body)
	}
	down.Store(true)
	// Anonymous callers get the state only; the reason is for the log and signed-in admins.
	if code, body := get(); code != 503 || !strings.Contains(body, `"unavailable"`) || strings.Contains(body, "connection refused") {
		t.Fatalf("down: %d %s", code, body)
	}
	down.Store(false)
	if code, _ := get(); code != 200 {
		t.Fatalf("back: %d", code)
	}
}

func TestPublicEndpoints(t *testing.T) {
	t.Parallel()
	s := newBareServer(t, func(context.Context) error { return nil })
	ts := httptest.NewServer(s)
	defer ts.Close()
	cases := []struct {
		path, wantType, wantBody string
		wantCode                 int
	}{
		{"/healthz", "text/plain", "ok", 200},
		{"/static/app.css", "text/css", "--accent", 200},
		{"/metrics", "text/html", "", 404}, // served on its own address (MetricsHandler) or behind a token
	}
	for _, tc := range cases {
		req, _ := http.NewRequest("GET", ts.URL+tc.path, nil)
		req.Header.Set("X-Request-ID", "abc-123")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tc.wantCode || !strings.HasPrefix(res.Header.Get("Content-Type"), tc.wantType) || !strings.Contains(string(b), tc.wantBody) {
			t.Errorf("%s: %d %q body lacks %q", tc.path, res.StatusCode, res.Header.Get("Content-Type"), tc.wantBody)
		}
		if res.Header.Get("X-Request-ID") != "abc-123" {
			t.Errorf("%s: request id not echoed: %q", tc.path, res.Header.Get("X-Request-ID"))
		}
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP %q", tc.path, csp)
		}
		if res.Header.Get("X-Content-Type-Options") != "nosniff" || res.Header.Get("Referrer-Policy") == "" {
			t.Errorf("%s: security headers missing", tc.path)
		}
	}
}

func TestMalformedRequestIDReplaced(t *testing.T) {
	t.Parallel()
	s := newBareServer(t, func(context.Context) error { return nil })
	req := httptest.NewRequest("GET", "/healthz", nil)
	req.Header.Set("X-Request-ID", "bad id\nwith newline<script>")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	id := rec.Header().Get("X-Request-ID")
	if id == "" || strings.ContainsAny(id, " \n<") {
		t.Fatalf("request id %q", id)
	}
}

func TestPanicBecomes500WithRequestID(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	s := &Server{deps: Deps{Logger: slog.New(slog.NewTextHandler(&logs, nil))}}
	h := s.withRequestID(s.recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
	id := rec.Header().Get("X-Request-ID")
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), id) {
		t.Fatalf("got %d %q", rec.Code, rec.Body.String())
	}
	if strings.Contains(rec.Body.String(), "boom") {
		t.Fatal("panic value leaked to the client")
	}
	if !strings.Contains(logs.String(), "boom") || !strings.Contains(logs.String(), id) {
		t.Fatalf("panic not logged with request id: %s", logs.String())
	}
}
