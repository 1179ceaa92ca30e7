package mcpclient_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// A server answering with a redirect is not followed in either era: the place it points to
// gets no request, so neither the session nor the bearer token reaches it.
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	var hits, withToken atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("Authorization") != "" {
			withToken.Add(1)
		}
		http.Error(w, "nothing here", http.StatusNotFound)
	}))
	t.Cleanup(elsewhere.Close)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirector.Close)
	for _, era := range []mcpclient.EraChoice{mcpclient.EraChoiceLegacy, mcpclient.EraChoiceExtension, mcpclient.EraAuto} {
		conn, err := mcpclient.Dial(ctxT(t, 10*time.Second), mcpclient.Options{URL: redirector.URL + "/mcp", Era: era, Token: "s3cret-bearer"})
		if err == nil {
			_ = conn.Close()
			t.Fatalf("era %s: a redirecting server was dialled", era)
		}
		if !strings.Contains(err.Error(), "redirect") {
			t.Errorf("era %s: the error does not say a redirect was refused: %v", era, err)
		}
	}
	if hits.Load() != 0 || withToken.Load() != 0 {
		t.Fatalf("the redirect target got %d requests, %d with the token", hits.Load(), withToken.Load())
	}
}
