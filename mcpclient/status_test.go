package mcpclient_test

import (
	"errors"
	"testing"

	"github.com/taskgate/taskgate/mcpclient"
)

func TestValidateTransition(t *testing.T) {
	t.Parallel()
	const (
		w  = mcpclient.StatusWorking
		ir = mcpclient.StatusInputRequired
		co = mcpclient.StatusCompleted
		fa = mcpclient.StatusFailed
		ca = mcpclient.StatusCancelled
	)
	allowed := map[[2]mcpclient.Status]bool{}
	for _, to := range []mcpclient.Status{w, ir, co, fa, ca} {
		allowed[[2]mcpclient.Status{"", to}] = true // first observation
		allowed[[2]mcpclient.Status{to, to}] = true // repeat
	}
	for _, from := range []mcpclient.Status{w, ir} {
		for _, to := range []mcpclient.Status{w, ir, co, fa, ca} {
			allowed[[2]mcpclient.Status{from, to}] = true
		}
	}
	for _, from := range []mcpclient.Status{"", w, ir, co, fa, ca} {
		for _, to := range []mcpclient.Status{w, ir, co, fa, ca, "bogus"} {
			err := mcpclient.ValidateTransition("t1", from, to)
			want := allowed[[2]mcpclient.Status{from, to}]
			if (err == nil) != want {
				t.Errorf("%q → %q: err %v, allowed %v", from, to, err, want)
			}
			if err != nil && !errors.Is(err, mcpclient.ErrInvalidTransition) {
				t.Errorf("%q → %q: %v does not wrap ErrInvalidTransition", from, to, err)
			}
		}
	}
}

func TestSanitizeMessage(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		in   string
		max  int
		want string
	}{
		"control characters stripped":  {"ok\x00\x1b[31m\x07done", 100, "ok[31mdone"},
		"newlines become spaces":       {"a\nb\tc", 100, "a b c"},
		"truncated on a rune boundary": {"ééééé", 6, "é…"},
		"invalid utf-8 replaced":       {"a\xffb", 100, "a\uFFFDb"},
		"bidi override stripped":       {"a\u202eb", 100, "ab"},
	}
	for name, tc := range cases {
		if got := mcpclient.SanitizeMessage(tc.in, tc.max); got != tc.want {
			t.Errorf("%s: %q, want %q", name, got, tc.want)
		}
	}
}
