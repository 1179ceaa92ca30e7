package operations

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/mail"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskgate/taskgate/mcpclient"
)

// ErrInvalidAnswer: an accepted answer does not fit the schema the server asked for.
var ErrInvalidAnswer = errors.New("the answer does not fit the requested schema")

// AnswerError names the field of an answer that does not fit the requested schema.
type AnswerError struct {
	// Field is the property; Problem says what is wrong, in words, naming the rule.
	Field, Problem string
}

// Error implements error.
func (e *AnswerError) Error() string { return fmt.Sprintf("field %q: %s", e.Field, e.Problem) }

// Unwrap returns ErrInvalidAnswer.
func (e *AnswerError) Unwrap() error { return ErrInvalidAnswer }

// checkAnswer checks an accepted form answer against the fields the server asked for and
// returns the content to send: a field the answer omits takes the schema's default when it
// has one (SEP-1034); then every required field must be present, no field the server did not
// ask for may be, and every value must keep its field's rules (type, enum/oneOf choices,
// string length and format, numeric bounds, list sizes). It is checked before anything is
// sent, so a server never sees an answer it did not ask for. The caller's map is not changed.
func checkAnswer(fields []Field, resp mcpclient.InputResponse) (map[string]any, error) {
	if resp.Action != mcpclient.ActionAccept {
		return resp.Content, nil
	}
	known := make(map[string]bool, len(fields))
	out := make(map[string]any, len(fields))
	for _, f := range fields {
		known[f.Name] = true
	}
	for name, v := range resp.Content {
		if !known[name] {
			return nil, &AnswerError{Field: name, Problem: "not asked for by the server"}
		}
		if v != nil {
			out[name] = v
		}
	}
	for _, f := range fields {
		v, ok := out[f.Name]
		if !ok && len(f.Default) > 0 {
			var d any
			if json.Unmarshal(f.Default, &d) == nil {
				out[f.Name], v, ok = d, d, true
			}
		}
		if !ok {
			if f.Required {
				return nil, &AnswerError{Field: f.Name, Problem: "required and missing"}
			}
			continue
		}
		if p := f.problem(normalizeValue(v)); p != "" {
			return nil, &AnswerError{Field: f.Name, Problem: p}
		}
	}
	return out, nil
}

// normalizeValue turns the numbers of a decoded value into float64 and lists into []any.
func normalizeValue(v any) any {
	switch x := v.(type) {
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = normalizeValue(s)
		}
		return out
	}
	if n, ok := number(v); ok {
		return n
	}
	return v
}

// problem says how value v breaks the field's rules, naming the rule, or "" when it fits.
// v is normalised: numbers are float64, lists []any.
func (f Field) problem(v any) string {
	switch f.Type {
	case "string":
		s, ok := v.(string)
		if !ok {
			return "must be a string (type string)"
		}
		return f.stringProblem(s)
	case "boolean":
		if _, ok := v.(bool); !ok {
			return "must be true or false (type boolean)"
		}
	case "number", "integer":
		n, ok := v.(float64)
		if !ok {
			return "must be a number (type " + f.Type + ")"
		}
		if f.Type == "integer" && n != math.Trunc(n) {
			return "must be a whole number (type integer)"
		}
		if f.Minimum != nil && n < *f.Minimum {
			return "must be at least " + formatNumber(*f.Minimum) + " (minimum)"
		}
		if f.Maximum != nil && n > *f.Maximum {
			return "must be at most " + formatNumber(*f.Maximum) + " (maximum)"
		}
	case "array":
		list, ok := v.([]any)
		if !ok {
			return "must be a list of choices (type array)"
		}
		if f.MinItems != nil && len(list) < *f.MinItems {
			return fmt.Sprintf("must have at least %d choices (minItems)", *f.MinItems)
		}
		if f.MaxItems != nil && len(list) > *f.MaxItems {
			return fmt.Sprintf("must have at most %d choices (maxItems)", *f.MaxItems)
		}
		seen := map[string]bool{}
		for _, it := range list {
			s, ok := it.(string)
			if !ok {
				return "every choice must be a string (items)"
			}
			if len(f.Choices) > 0 && !f.allows(s) {
				return "every choice must be one of " + f.choiceList() + " (items enum)"
			}
			if seen[s] {
				return "lists a choice twice (items)"
			}
			seen[s] = true
		}
	}
	return ""
}

func (f Field) stringProblem(s string) string {
	n := utf8.RuneCountInString(s)
	if f.MinLength != nil && n < *f.MinLength {
		return fmt.Sprintf("must be at least %d characters (minLength)", *f.MinLength)
	}
	if f.MaxLength != nil && n > *f.MaxLength {
		return fmt.Sprintf("must be at most %d characters (maxLength)", *f.MaxLength)
	}
	if len(f.Choices) > 0 && !f.allows(s) {
		return "must be one of " + f.choiceList() + " (enum)"
	}
	switch f.Format {
	case "email":
		a, err := mail.ParseAddress(s)
		if err != nil || a.Name != "" || a.Address != s {
			return "must be an email address (format email)"
		}
	case "uri":
		u, err := url.Parse(s)
		if err != nil || u.Scheme == "" || strings.ContainsAny(s, " \t\r\n") {
			return "must be an absolute URI (format uri)"
		}
	case "date":
		if _, err := time.Parse(time.DateOnly, s); err != nil {
			return "must be a date like 2026-01-31 (format date)"
		}
	case "date-time":
		if _, err := time.Parse(time.RFC3339, s); err != nil {
			return "must be a date and time like 2026-01-31T09:30:00Z (format date-time)"
		}
	}
	return ""
}

func (f Field) allows(s string) bool {
	for _, c := range f.Choices {
		if c.Value == s {
			return true
		}
	}
	return false
}

// choiceList names the allowed values, the first ten at most.
func (f Field) choiceList() string {
	var b strings.Builder
	for i, c := range f.Choices {
		if i == 10 {
			fmt.Fprintf(&b, " or %d more", len(f.Choices)-10)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(c.Value))
	}
	return b.String()
}

func formatNumber(n float64) string { return strconv.FormatFloat(n, 'f', -1, 64) }

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
