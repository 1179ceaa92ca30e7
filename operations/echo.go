package operations

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Redacted replaces a person's answer where a server echoes it back.
const Redacted = "[redacted]"

// A value a person answered is never stored. What is stored, per operation, is a keyed hash
// (HMAC-SHA256 under the installation's answer_echo key, shared by every replica through the
// database) of each value in a normal form:
//
//   - text: a string of two or more characters (or a short number) with case folded and runs
//     of white space made one space, with its length in characters;
//   - digits: the digits of a number, or of a string that is mostly digits (a card number
//     typed with spaces), when it has four or more.
//
// Whichever replica records the operation's result, preview, status messages or a new
// question slides over the server's text: every span of a stored length that starts and ends
// at a word boundary is hashed and cut out when its hash is stored (so "Jane Roe" is found in
// "for JANE  ROE," but not inside "Janet"), and every run of digits (single spaces, dashes,
// dots or commas between them allowed, and a number's exponent form, so 4111111111111111 is
// found as 4.111111111111111e+15 or 4111 1111 1111 1111) whose digits hash to a stored value.
// A value echoed inside a longer word or a longer run of digits is not found.

// echoKeyName is the install key the answer hashes are made with.
const echoKeyName = "answer_echo"

// Kinds of stored answer hashes.
const (
	echoText   = "text"
	echoDigits = "digits"
)

// echoToken is one stored hash of an answered value.
type echoToken struct {
	kind  string
	mac   []byte
	runes int
}

// installKey returns this installation's key name, making it on first use; every replica
// reads the same one.
func installKey(ctx context.Context, q querier, name string) ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("make install key %s: %w", name, err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO install_keys (name, key) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`, name, k); err != nil {
		return nil, fmt.Errorf("store install key %s: %w", name, err)
	}
	var key []byte
	if err := q.QueryRow(ctx, `SELECT key FROM install_keys WHERE name = $1`, name).Scan(&key); err != nil {
		return nil, fmt.Errorf("read install key %s: %w", name, err)
	}
	return key, nil
}

// echoKeyCache holds the answer_echo key once read.
type echoKeyCache struct {
	mu  sync.Mutex
	key []byte
}

func (c *echoKeyCache) get(ctx context.Context, q querier) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.key != nil {
		return c.key, nil
	}
	k, err := installKey(ctx, q, echoKeyName)
	if err != nil {
		return nil, err
	}
	c.key = k
	return k, nil
}

// digitsOf returns the digits of a number as a person typed it: 4111111111111111 whether it
// arrived as an integer or as 4.111111111111111e+15. Fractions keep their digits too.
func digitsOf(v any) string {
	var s string
	switch v := v.(type) {
	case float64:
		s = strconv.FormatFloat(v, 'f', -1, 64)
	case float32:
		s = strconv.FormatFloat(float64(v), 'f', -1, 32)
	case int, int64, int32, uint, uint64, uint32:
		s = fmt.Sprint(v)
	case json.Number:
		if f, err := v.Float64(); err == nil {
			s = strconv.FormatFloat(f, 'f', -1, 64)
		} else {
			s = v.String()
		}
	case string:
		s = v
	default:
		return ""
	}
	var b strings.Builder
	for _, c := range s {
		if c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// answerNeedles are the texts and digit strings to cut out for values: strings of two or more
// characters as typed; numbers, and strings that are mostly digits (a card number typed with
// spaces), by their digits when they have four or more.
func answerNeedles(values []any) (texts, digits []string) {
	for _, v := range values {
		switch v := v.(type) {
		case string:
			if t := strings.TrimSpace(v); len(t) >= 2 {
				texts = append(texts, t)
			}
			if d := digitsOf(v); len(d) >= 4 && len(d)*2 >= len(strings.TrimSpace(v)) {
				digits = append(digits, d)
			}
		case bool, nil:
		case []any:
			t, d := answerNeedles(v)
			texts, digits = append(texts, t...), append(digits, d...)
		default:
			if d := digitsOf(v); len(d) >= 4 {
				digits = append(digits, d)
			} else if t := fmt.Sprint(v); len(t) >= 2 {
				texts = append(texts, t)
			}
		}
	}
	return texts, digits
}

// normRunes is s in the form text is hashed in: case folded rune by rune, each run of white
// space one space. starts and ends give each rune's byte span in s (a space's span covers its
// whole run).
func normRunes(s string) (norm []rune, starts, ends []int) {
	for i, r := range s {
		size := len(string(r))
		if unicode.IsSpace(r) {
			if n := len(norm); n > 0 && norm[n-1] == ' ' {
				ends[n-1] = i + size
				continue
			}
			r = ' '
		}
		norm = append(norm, unicode.ToLower(r))
		starts = append(starts, i)
		ends = append(ends, i+size)
	}
	return norm, starts, ends
}

// normText is s normalised and trimmed, as an answered value is hashed.
func normText(s string) string {
	n, _, _ := normRunes(strings.TrimSpace(s))
	return string(n)
}

func macOf(h hash.Hash, kind, s string) [32]byte {
	h.Reset()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write([]byte(s))
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// echoTokens are the hashes to store for the values a person answered.
func echoTokens(key []byte, values []any) []echoToken {
	h := hmac.New(sha256.New, key)
	texts, digits := answerNeedles(values)
	var out []echoToken
	seen := map[[32]byte]bool{}
	add := func(kind, s string, runes int) {
		m := macOf(h, kind, s)
		if !seen[m] {
			seen[m] = true
			out = append(out, echoToken{kind: kind, mac: m[:], runes: runes})
		}
	}
	for _, t := range texts {
		if n := normText(t); len([]rune(n)) >= 2 {
			add(echoText, n, len([]rune(n)))
		}
	}
	for _, d := range digits {
		add(echoDigits, d, len(d))
	}
	return out
}

// echoMatcher finds answered values in a server's text by their hashes. The nil matcher
// finds nothing.
type echoMatcher struct {
	h      hash.Hash
	text   map[[32]byte]bool
	digits map[[32]byte]bool
	// lens are the lengths of the text values, longest first.
	lens []int
	buf  []byte
}

func newEchoMatcher(key []byte, tokens []echoToken) *echoMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &echoMatcher{h: hmac.New(sha256.New, key), text: map[[32]byte]bool{}, digits: map[[32]byte]bool{}}
	for _, t := range tokens {
		var k [32]byte
		copy(k[:], t.mac)
		switch t.kind {
		case echoText:
			m.text[k] = true
			if !slices.Contains(m.lens, t.runes) {
				m.lens = append(m.lens, t.runes)
			}
		case echoDigits:
			m.digits[k] = true
		}
	}
	slices.SortFunc(m.lens, func(a, b int) int { return b - a })
	return m
}

// processKey hashes values that never leave this process (an error quoting an answer).
var processKey = func() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}()

// matcherForValues finds values answered in this very request.
func matcherForValues(values []any) *echoMatcher {
	return newEchoMatcher(processKey, echoTokens(processKey, values))
}

func (m *echoMatcher) isText(norm string) bool { return m.text[macOf(m.h, echoText, norm)] }

// isTextRunes is isText of a span of normalised runes, without allocating.
func (m *echoMatcher) isTextRunes(rs []rune) bool {
	m.buf = append(m.buf[:0], echoText...)
	m.buf = append(m.buf, 0)
	for _, r := range rs {
		m.buf = utf8.AppendRune(m.buf, r)
	}
	m.h.Reset()
	m.h.Write(m.buf)
	var k [32]byte
	m.h.Sum(k[:0])
	return m.text[k]
}

func (m *echoMatcher) isDigits(d string) bool {
	return len(m.digits) > 0 && d != "" && m.digits[macOf(m.h, echoDigits, d)]
}

func alnum(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// redactText cuts the answered values out of s.
func (m *echoMatcher) redactText(s string) string {
	if m == nil || s == "" {
		return s
	}
	if len(m.lens) > 0 {
		s = m.redactWords(s)
	}
	if len(m.digits) > 0 {
		s = m.redactDigits(s)
	}
	return s
}

// redactWords cuts out every span of a stored length, starting and ending at a word boundary,
// whose normal form hashes to a stored text value; the longest wins.
func (m *echoMatcher) redactWords(s string) string {
	norm, starts, ends := normRunes(s)
	n := len(norm)
	boundary := func(i int) bool { return i == 0 || i == n || !alnum(norm[i-1]) || !alnum(norm[i]) }
	var out strings.Builder
	last := 0
	for i := 0; i < n; i++ {
		if norm[i] == ' ' || !boundary(i) {
			continue
		}
		for _, l := range m.lens {
			j := i + l
			if j > n || norm[j-1] == ' ' || !boundary(j) {
				continue
			}
			if m.isTextRunes(norm[i:j]) {
				out.WriteString(s[last:starts[i]])
				out.WriteString(Redacted)
				last = ends[j-1]
				i = j - 1
				break
			}
		}
	}
	if last == 0 {
		return s
	}
	out.WriteString(s[last:])
	return out.String()
}

// redactDigits cuts out every run of digits (single spaces, dashes, dots or commas between
// them allowed, and a number's exponent form) whose digits hash to a stored value.
func (m *echoMatcher) redactDigits(s string) string {
	var out strings.Builder
	for i := 0; i < len(s); {
		if s[i] < '0' || s[i] > '9' {
			out.WriteByte(s[i])
			i++
			continue
		}
		j, end := i, i
		var d strings.Builder
		for j < len(s) {
			c := s[j]
			switch {
			case c >= '0' && c <= '9':
				d.WriteByte(c)
				j++
				end = j
				continue
			case (c == ' ' || c == '-' || c == '.' || c == ',') && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9':
				j++
				continue
			}
			break
		}
		run := s[i:end]
		if exp := exponentEnd(s, end); exp > end {
			if f, err := strconv.ParseFloat(s[i:exp], 64); err == nil && m.isDigits(digitsOf(f)) {
				out.WriteString(Redacted)
				i = exp
				continue
			}
		}
		if m.isDigits(d.String()) {
			out.WriteString(Redacted)
		} else {
			out.WriteString(run)
		}
		i = end
	}
	return out.String()
}

// exponentEnd returns where an exponent ("e+15") starting at i ends, or i.
func exponentEnd(s string, i int) int {
	if i >= len(s) || (s[i] != 'e' && s[i] != 'E') {
		return i
	}
	j := i + 1
	if j < len(s) && (s[j] == '+' || s[j] == '-') {
		j++
	}
	k := j
	for k < len(s) && s[k] >= '0' && s[k] <= '9' {
		k++
	}
	if k == j {
		return i
	}
	return k
}

// redactJSON cuts the values out of a JSON document: in strings as in redactText, and numbers
// whose digits or text match are replaced by the string "[redacted]".
func (m *echoMatcher) redactJSON(raw []byte) []byte {
	if m == nil || len(raw) == 0 {
		return raw
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case string:
			return m.redactText(v)
		case json.Number:
			if m.isDigits(digitsOf(v)) || len(m.lens) > 0 && m.isText(normText(v.String())) {
				return Redacted
			}
			return v
		case []any:
			for i := range v {
				v[i] = walk(v[i])
			}
			return v
		case map[string]any:
			for k, x := range v {
				v[k] = walk(x)
			}
			return v
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return raw
	}
	return out
}

// redactEnvelope cuts the answered values out of everything an envelope shows from the server.
func (m *echoMatcher) redactEnvelope(e *Envelope) {
	if m == nil {
		return
	}
	e.Preview = m.redactText(e.Preview)
	e.StatusMessage = m.redactText(e.StatusMessage)
	e.Result = m.redactJSON(e.Result)
}

// RememberAnswer stores the hashes of the values a person answered for operation opID, before
// the answer is sent, so whichever replica records what the server says next cuts them out.
func (s *Store) RememberAnswer(ctx context.Context, opID string, content map[string]any) error {
	values := make([]any, 0, len(content))
	for _, v := range content {
		values = append(values, v)
	}
	key, err := s.echoKey.get(ctx, s.pool)
	if err != nil {
		return err
	}
	tokens := echoTokens(key, values)
	if len(tokens) == 0 {
		return nil
	}
	kinds, macs, runes := make([]string, len(tokens)), make([][]byte, len(tokens)), make([]int32, len(tokens))
	for i, t := range tokens {
		kinds[i], macs[i], runes[i] = t.kind, t.mac, int32(min(t.runes, 1<<30)) //nolint:gosec // bounded just before
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO answer_echoes (operation_id, kind, mac, runes)
		SELECT $1, k, m, r FROM unnest($2::text[], $3::bytea[], $4::int[]) AS t(k, m, r)
		ON CONFLICT DO NOTHING`, opID, kinds, macs, runes); err != nil {
		return fmt.Errorf("remember answer of %s: %w", opID, err)
	}
	return nil
}

// echoes returns the matcher of the values answered for opID (nil when none were).
func (s *Store) echoes(ctx context.Context, q querier, opID string) (*echoMatcher, error) {
	rows, err := q.Query(ctx, `SELECT kind, mac, runes FROM answer_echoes WHERE operation_id = $1`, opID)
	if err != nil {
		return nil, fmt.Errorf("answer hashes of %s: %w", opID, err)
	}
	tokens, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (echoToken, error) {
		var t echoToken
		return t, r.Scan(&t.kind, &t.mac, &t.runes)
	})
	if err != nil {
		return nil, fmt.Errorf("answer hashes of %s: %w", opID, err)
	}
	if len(tokens) == 0 {
		return nil, nil
	}
	key, err := s.echoKey.get(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	return newEchoMatcher(key, tokens), nil
}
