package operations

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Redacted replaces a person's answer where a server echoes it back.
const Redacted = "[redacted]"

// answerMemory holds, in this process only, the values people answered for each operation
// until its envelope is recorded, so a server echoing them in its result or status message has
// them cut out. Values are never written to the database or a log.
type answerMemory struct {
	mu   sync.Mutex
	byOp map[string]answerEntry
}

type answerEntry struct {
	values []any
	at     time.Time
}

// answerMemoryFor is how long answered values are kept for an operation whose envelope never
// comes.
const answerMemoryFor = 24 * time.Hour

func (m *answerMemory) remember(opID string, content map[string]any, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byOp == nil {
		m.byOp = map[string]answerEntry{}
	}
	for id, e := range m.byOp {
		if now.Sub(e.at) > answerMemoryFor {
			delete(m.byOp, id)
		}
	}
	e := m.byOp[opID]
	for _, v := range content {
		e.values = append(e.values, v)
	}
	e.at = now
	m.byOp[opID] = e
}

// take returns and forgets the values answered for opID.
func (m *answerMemory) take(opID string) []any {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byOp[opID]
	delete(m.byOp, opID)
	return e.values
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

// redactText cuts texts out of s, and every run of digits (single spaces, dashes or dots
// between them allowed, and a number's exponent form) whose digits are one of digits.
func redactText(s string, texts, digits []string) string {
	for _, t := range texts {
		s = strings.ReplaceAll(s, t, Redacted)
	}
	if len(digits) == 0 {
		return s
	}
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
			if f, err := strconv.ParseFloat(s[i:exp], 64); err == nil {
				if ds := digitsOf(f); contains(digits, ds) {
					out.WriteString(Redacted)
					i = exp
					continue
				}
			}
		}
		if contains(digits, d.String()) {
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// redactJSON cuts the values out of a JSON document: in strings as in redactText, and numbers
// whose digits match are replaced by the string "[redacted]".
func redactJSON(raw []byte, texts, digits []string) []byte {
	if len(raw) == 0 {
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
			return redactText(v, texts, digits)
		case json.Number:
			if contains(digits, digitsOf(v)) || contains(texts, v.String()) {
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
func redactEnvelope(e *Envelope, values []any) {
	texts, digits := answerNeedles(values)
	if len(texts) == 0 && len(digits) == 0 {
		return
	}
	e.Preview = redactText(e.Preview, texts, digits)
	e.StatusMessage = redactText(e.StatusMessage, texts, digits)
	e.Result = redactJSON(e.Result, texts, digits)
}
