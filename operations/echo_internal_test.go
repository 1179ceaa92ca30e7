package operations

import (
	"bytes"
	"strings"
	"testing"
)

// A card number answered as a JSON number is found however the server prints it back; a
// string answer is found whatever its case and spacing, as whole words; other numbers and
// words are left alone. Only hashes go into the matcher.
func TestRedactTextComparesNumbersByDigits(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, 32)
	values := []any{float64(4111111111111111), "hunter22 secret", "Jane Roe", int64(42)}
	tokens := echoTokens(key, values)
	for _, tok := range tokens {
		for _, v := range []string{"4111111111111111", "hunter22", "jane", "Jane"} {
			if bytes.Contains(tok.mac, []byte(v)) {
				t.Fatalf("token holds %q", v)
			}
		}
	}
	m := newEchoMatcher(key, tokens)
	for _, c := range []struct{ in, want string }{
		{"card 4.111111111111111e+15 refused", "card [redacted] refused"},
		{"card 4111111111111111 ok", "card [redacted] ok"},
		{"card 4111 1111 1111 1111.", "card [redacted]."},
		{"card 4111-1111-1111-1111", "card [redacted]"},
		{"other 4111111111111112 and 4111", "other 4111111111111112 and 4111"},
		{"password hunter22 secret!", "password [redacted]!"},
		{"password HUNTER22   Secret", "password [redacted]"},
		{"for JANE\tROE, pin", "for [redacted], pin"},
		{"Janet Roes and Jane Roebuck", "Janet Roes and Jane Roebuck"},
		{"answer 42 not 420 or x42", "answer [redacted] not 420 or x42"},
		{"«Jane Roe»", "«[redacted]»"},
	} {
		if got := m.redactText(c.in); got != c.want {
			t.Errorf("redactText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	got := string(m.redactJSON([]byte(`{"card":4111111111111111,"n":[4.111111111111111e+15,7,42],"s":"x 4111111111111111","who":"jane roe"}`)))
	if strings.Contains(got, "4111") || strings.Contains(got, "4.111") || strings.Contains(got, "jane") || strings.Contains(got, ",42") || !strings.Contains(got, `7`) {
		t.Errorf("redactJSON = %s", got)
	}
	// Another key's hashes match nothing: the matcher works only on this installation's key.
	other := newEchoMatcher(bytes.Repeat([]byte{8}, 32), tokens)
	if got := other.redactText("card 4111111111111111 Jane Roe"); got != "card 4111111111111111 Jane Roe" {
		t.Errorf("hashes under another key matched: %q", got)
	}
	var none *echoMatcher
	if got := none.redactText("Jane Roe"); got != "Jane Roe" {
		t.Errorf("the nil matcher changed text: %q", got)
	}
}

// BenchmarkRedactKeptResult measures cutting three answered values out of a kept result at
// its size limit.
func BenchmarkRedactKeptResult(b *testing.B) {
	key := bytes.Repeat([]byte{7}, 32)
	m := newEchoMatcher(key, echoTokens(key, []any{float64(4111111111111111), "hunter22 secret", "Jane Roe"}))
	var doc bytes.Buffer
	doc.WriteString(`{"lines":[`)
	for doc.Len() < KeptResultMax-100 {
		doc.WriteString(`"refund of 10.50 for order 1234-5678 by customer Janet Roes, ok",`)
	}
	doc.WriteString(`"end"]}`)
	raw := doc.Bytes()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		m.redactJSON(raw)
	}
}
