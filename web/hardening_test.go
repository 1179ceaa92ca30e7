package web

import (
	"net/http"
	"net/url"
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
