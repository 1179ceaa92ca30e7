package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
)

// apiDocument is the part of openapi.json the contract test reads.
type apiDocument struct {
	Paths      map[string]map[string]docOperation `json:"paths"`
	Components struct {
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"components"`
}

type docOperation struct {
	Responses map[string]struct {
		Ref     string         `json:"$ref"`
		Headers map[string]any `json:"headers"`
	} `json:"responses"`
}

// documented reports whether the document answers method path with status, and returns the
// response's $ref (the Problem shape for errors) and headers.
func (d apiDocument) documented(method, path string, status int) (ref string, headers map[string]any, ok bool) {
	for tmpl, ops := range d.Paths {
		seg := regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(tmpl, "SEGMENT")
		re := "^/api/v1" + strings.ReplaceAll(regexp.QuoteMeta(seg), "SEGMENT", `[^/]+`) + "$"
		if !regexp.MustCompile(re).MatchString(path) {
			continue
		}
		op, found := ops[strings.ToLower(method)]
		if !found {
			return "", nil, false
		}
		r, found := op.Responses[strconv.Itoa(status)]
		return r.Ref, r.Headers, found
	}
	return "", nil, false
}

// Every /api/v1 error answers JSON in the Problem shape, with a status the document states
// for that path and method.
func TestAPIErrorsKeepTheDocumentedContract(t *testing.T) {
	t.Parallel()
	var doc apiDocument
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.URL(t)
	pool, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := opstest.Setup(t, opstest.Options{Pool: pool})
	e := newTestEnv(t, func(d *Deps) { d.Operations = b.Ops })
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	start := `{"workflow": "refund", "tenant": "acme", "actor": "app", "arguments": {"outcome": "hang"}}`
	res, body := e.apiDo(t, "acme-token", "POST", "/api/v1/operations", start, key("c-1"))
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("start: %d %s", res.StatusCode, body)
	}
	var sr operations.StartResponse
	_ = json.Unmarshal([]byte(body), &sr)
	self := "/api/v1/operations/" + sr.OperationID

	type call struct {
		name, who, method, path, body string
		hdr                           map[string]string
		status                        int
		code                          string
	}
	calls := []call{
		{"no token", "", "GET", "/api/v1/operations", "", nil, 401, "unauthorized"},
		{"bad token", "", "GET", "/api/v1/operations", "", map[string]string{"Authorization": "Bearer nope"}, 401, "unauthorized"},
		{"unknown path", "acme-token", "GET", "/api/v1/nothing/here", "", nil, 404, "not_found"},
		{"unknown operation", "acme-token", "GET", "/api/v1/operations/00000000-0000-0000-0000-000000000000", "", nil, 404, "not_found"},
		{"wrong method", "acme-token", "DELETE", "/api/v1/operations", "", nil, 405, "method_not_allowed"},
		{"declared too large", "acme-token", "POST", "/api/v1/operations", strings.Repeat(" ", 2<<20), key("c-2"), 413, "too_large"},
		{"trailing garbage", "acme-token", "POST", "/api/v1/operations", start + `garbage`, key("c-3"), 400, "invalid_request"},
		{"second value", "acme-token", "POST", "/api/v1/operations", start + start, key("c-4"), 400, "invalid_request"},
		{"text/plain", "acme-token", "POST", "/api/v1/operations", start, map[string]string{"Idempotency-Key": "c-5", "Content-Type": "text/plain"}, 415, "unsupported_media_type"},
		{"NUL in a field: actor", "acme-token", "POST", "/api/v1/operations", strings.Replace(start, `"app"`, `"a\u0000pp"`, 1), key("c-6"), 400, "invalid_request"},
		{"NUL in a field: arguments", "acme-token", "POST", "/api/v1/operations", strings.Replace(start, `"hang"`, `"ha\u0000ng"`, 1), key("c-7"), 400, "invalid_request"},
		{"bogus task_state", "acme-token", "GET", "/api/v1/operations?task_state=bogus", "", nil, 400, "invalid_request"},
		{"bogus domain_outcome", "acme-token", "GET", "/api/v1/operations?domain_outcome=bogus", "", nil, 400, "invalid_request"},
		{"bogus route", "acme-token", "GET", "/api/v1/operations?route=bogus", "", nil, 400, "invalid_request"},
		{"unknown filter", "acme-token", "GET", "/api/v1/operations?colour=red", "", nil, 400, "invalid_request"},
		{"limit too large", "acme-token", "GET", "/api/v1/operations?limit=9999", "", nil, 400, "invalid_request"},
		{"limit zero", "acme-token", "GET", "/api/v1/operations?limit=0", "", nil, 400, "invalid_request"},
		{"NUL in a field: reason", "acme-token", "POST", self + "/cancel", `{"reason": "a\u0000"}`, nil, 400, "invalid_request"},
		{"cancel times out", "acme-token", "POST", self + "/cancel", `{"reason": "customer withdrew"}`, nil, 504, "upstream_timeout"},
	}
	check := func(c call) {
		t.Helper()
		res, body := e.apiDo(t, c.who, c.method, c.path, c.body, c.hdr)
		if res.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, res.StatusCode, c.status, body)
			return
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q", c.name, ct)
		}
		var p struct {
			Error   *string `json:"error"`
			Message *string `json:"message"`
		}
		if err := json.Unmarshal([]byte(body), &p); err != nil || p.Error == nil || p.Message == nil || *p.Error != c.code || *p.Message == "" {
			t.Errorf("%s: body %s, want the Problem shape with error %s", c.name, body, c.code)
			return
		}
		if _, field, ok := strings.Cut(c.name, "NUL in a field: "); ok && !strings.Contains(*p.Message, field) {
			t.Errorf("%s: message %q does not name the field", c.name, *p.Message)
		}
		path, _, _ := strings.Cut(c.path, "?")
		ref, headers, ok := doc.documented(c.method, path, c.status)
		switch {
		case c.status == 404 && c.name == "unknown path", c.status == 405:
			// Any path: the document states these in components.responses.
			name := map[int]string{404: "NotFound", 405: "MethodNotAllowed"}[c.status]
			if _, ok := doc.Components.Responses[name]; !ok {
				t.Errorf("%s: components.responses.%s is not documented", c.name, name)
			}
		case !ok:
			t.Errorf("%s: %s %s does not document %d", c.name, c.method, path, c.status)
		case ref != "#/components/responses/Problem" && !strings.HasPrefix(ref, "#/components/responses/"):
			t.Errorf("%s: %d of %s %s is documented as %q, not a Problem", c.name, c.status, c.method, path, ref)
		}
		if c.status == 503 {
			if res.Header.Get("Retry-After") == "" {
				t.Errorf("%s: no Retry-After", c.name)
			}
			if _, ok := headers["Retry-After"]; !ok && !strings.Contains(ref, "Unavailable") {
				t.Errorf("%s: Retry-After is not documented", c.name)
			}
		}
	}
	// The cancel budget is 2 s; the receiver holds every answer 3 s from here on.
	b.Receiver.Knobs().DelayAll(3 * time.Second)
	for _, c := range calls {
		check(c)
	}
	b.Receiver.Knobs().DelayAll(0)

	// The server cannot be reached: 502.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	pol, err := config.Parse(fmt.Appendf(nil, opstest.Policy, dead+"/mcp", dead, "legacy"))
	if err != nil {
		t.Fatal(err)
	}
	b.Policy = pol
	b.Restart(t)
	e.srv.deps.Operations = b.Ops
	check(call{"server unreachable", "acme-token", "POST", self + "/cancel", `{"reason": "again"}`, nil, 502, "upstream_error"})

	// The database is down: 503 with Retry-After.
	u, _ := url.Parse(dbURL)
	db := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	admin, err := pgx.Connect(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS false"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" ALLOW_CONNECTIONS true")
	})
	if _, err := admin.Exec(context.Background(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", db); err != nil {
		t.Fatal(err)
	}
	check(call{"database down (get)", "acme-token", "GET", self, "", nil, 503, "database_unavailable"})
	check(call{"database down (list)", "acme-token", "GET", "/api/v1/operations", "", nil, 503, "database_unavailable"})
	check(call{"database down (start)", "acme-token", "POST", "/api/v1/operations", start, key("c-9"), 503, "database_unavailable"})
}
