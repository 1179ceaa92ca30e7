package web

import (
	"bytes"
	"encoding/base64"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
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

// countingReader is an endless body that counts what was read of it.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	c.n += int64(len(p))
	return len(p), nil
}

func TestRequestBodiesAreBounded(t *testing.T) {
	t.Parallel()
	e := newOpsEnv(t)
	// A multipart sign-in whose file part never ends: without a bound the form parser spools
	// it all to disk before the anti-forgery check refuses it.
	var head bytes.Buffer
	mw := multipart.NewWriter(&head)
	if _, err := mw.CreateFormFile("f", "f"); err != nil {
		t.Fatal(err)
	}
	const sent = 64 << 20
	for _, c := range []struct {
		who, path, ctype string
		head             []byte
	}{
		{"", "/signin", mw.FormDataContentType(), head.Bytes()},
		{"operator", "/signout", mw.FormDataContentType(), head.Bytes()},
		{"acme-token", "/api/v1/operations", "application/json", []byte(`{"workflow": "`)},
	} {
		body := &countingReader{}
		req := httptest.NewRequest(http.MethodPost, c.path, io.MultiReader(bytes.NewReader(c.head), io.LimitReader(body, sent)))
		req.Header = e.request(t, c.who, http.MethodPost, c.path, nil).Header.Clone()
		req.ContentLength = -1 // chunked: the size is not known up front
		req.Header.Set("Content-Type", c.ctype)
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		e.srv.ServeHTTP(rec, req)
		if rec.Code < 400 || rec.Code >= 500 {
			t.Errorf("%s %s: status %d, want a refusal", c.who, c.path, rec.Code)
		}
		if body.n > 4*maxBodyBytes {
			t.Errorf("%s %s: %d bytes of the body read, want at most about %d", c.who, c.path, body.n, maxBodyBytes)
		}
	}
	// A declared oversized body is refused before it is read.
	req := e.request(t, "", http.MethodPost, "/signin", nil)
	req.Body = io.NopCloser(io.LimitReader(&countingReader{}, 2*maxBodyBytes))
	req.ContentLength = 2 * maxBodyBytes
	if res, _ := send(t, req); res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("declared 2 MiB: status %d, want 413", res.StatusCode)
	}
}
