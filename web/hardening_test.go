package web

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Tests of the console's defences against hostile input: redirects, body sizes, cursors.

func TestSignInNeverRedirectsOffSite(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for _, next := range []string{"//evil.example", "/\\evil.example", "/\t/evil.example", "/\n/evil.example", "/\r/evil.example",
		"/\\/evil.example", "https://evil.example", "javascript:alert(1)", "/%2F/evil.example", "/signin?next=//evil.example"} {
		t.Run(url.QueryEscape(next), func(t *testing.T) {
			if got := safeNext(next); got != "/" {
				t.Errorf("safeNext(%q) = %q, want /", next, got)
			}
			// A signed-in visitor is sent on at once; a form post signs in and is sent on.
			res, _ := e.do(t, "viewer", http.MethodGet, "/signin?next="+url.QueryEscape(next), nil)
			if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/" {
				t.Errorf("signed in: status %d location %q, want 303 /", res.StatusCode, loc)
			}
		})
	}
	for _, next := range []string{"/audit", "/operations?tenant=acme&after=x", "/reconcile/12"} {
		if got := safeNext(next); got != next {
			t.Errorf("safeNext(%q) = %q, want it kept", next, got)
		}
	}
}

func TestForgedListCursorIsABadRequest(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	e.start(t, "acme", "refund", "c1", `{"outcome": "hang"}`)
	// Well-formed base64 around a time and 36 characters that are not a UUID.
	forged := base64.RawURLEncoding.EncodeToString([]byte("2030-01-01T00:00:00Z|" + strings.Repeat("z", 36)))
	for _, c := range []struct{ who, path string }{
		{"operator", "/operations?after=" + forged},
		{"acme-token", "/api/v1/operations?after=" + forged},
	} {
		res, body := e.do(t, c.who, http.MethodGet, c.path, nil)
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("%s %s: status %d, want 400\n%.200s", c.who, c.path, res.StatusCode, body)
		}
	}
}
