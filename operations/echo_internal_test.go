package operations

import (
	"strings"
	"testing"
)

// A card number answered as a JSON number is found however the server prints it back; other
// numbers are left alone.
func TestRedactTextComparesNumbersByDigits(t *testing.T) {
	t.Parallel()
	texts, digits := answerNeedles([]any{float64(4111111111111111), "hunter22 secret"})
	for _, c := range []struct{ in, want string }{
		{"card 4.111111111111111e+15 refused", "card [redacted] refused"},
		{"card 4111111111111111 ok", "card [redacted] ok"},
		{"card 4111 1111 1111 1111.", "card [redacted]."},
		{"card 4111-1111-1111-1111", "card [redacted]"},
		{"other 4111111111111112 and 42", "other 4111111111111112 and 42"},
		{"password hunter22 secret!", "password [redacted]!"},
	} {
		if got := redactText(c.in, texts, digits); got != c.want {
			t.Errorf("redactText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	got := string(redactJSON([]byte(`{"card":4111111111111111,"n":[4.111111111111111e+15,7],"s":"x 4111111111111111"}`), texts, digits))
	if strings.Contains(got, "4111") || strings.Contains(got, "4.111") || !strings.Contains(got, `7`) {
		t.Errorf("redactJSON = %s", got)
	}
}
