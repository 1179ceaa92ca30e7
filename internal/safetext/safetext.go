// Package safetext is the one place where text is made fit for PostgreSQL and cut to size.
//
// PostgreSQL's text and jsonb refuse the NUL character (U+0000, "\u0000" in JSON) and invalid
// UTF-8. Text from an MCP server or a job API is data: Clean and CleanJSON replace what
// PostgreSQL cannot store with U+FFFD and report that they did, so the record can say it is not
// verbatim. Text from an API caller is refused instead: Check names the field. Cut shortens a
// string on a character boundary, never inside one.
package safetext

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Replacement stands in for what PostgreSQL cannot store.
const Replacement = "\uFFFD"

// ErrUnsafe is wrapped by Check's errors.
var ErrUnsafe = errors.New("text PostgreSQL cannot store")

// Storable reports whether s is valid UTF-8 without NUL.
func Storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// Clean returns s with invalid UTF-8 and NUL replaced by U+FFFD, and whether anything was
// replaced.
func Clean(s string) (string, bool) {
	if Storable(s) {
		return s, false
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, Replacement), "\x00", Replacement), true
}

// Check refuses caller text PostgreSQL cannot store, naming field.
func Check(field, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrUnsafe, field)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s contains a NUL character (\\u0000)", ErrUnsafe, field)
	}
	return nil
}

// CheckJSON refuses a JSON document from a caller whose strings (keys or values) hold
// \u0000 or whose bytes are not valid UTF-8, naming field.
func CheckJSON(field string, doc []byte) error {
	if !utf8.Valid(doc) {
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrUnsafe, field)
	}
	if _, changed := CleanJSON(doc); changed {
		return fmt.Errorf("%w: %s contains a NUL character (\\u0000)", ErrUnsafe, field)
	}
	return nil
}

// CleanJSON returns a JSON document with every \u0000 escape inside its strings replaced by
// \ufffd and invalid UTF-8 replaced by U+FFFD, and whether anything was replaced. It keeps the
// document's structure byte for byte otherwise; it does not validate the JSON.
func CleanJSON(doc []byte) ([]byte, bool) {
	changed := false
	if !utf8.Valid(doc) {
		doc = []byte(strings.ToValidUTF8(string(doc), Replacement))
		changed = true
	}
	var out []byte // nil until the first replacement
	inString, last := false, 0
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		if !inString {
			if c == '"' {
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case 0:
			// A raw NUL is not valid JSON; replace it all the same.
			out = append(out, doc[last:i]...)
			out = append(out, `\ufffd`...)
			last = i + 1
		case '\\':
			if i+5 < len(doc) && doc[i+1] == 'u' && string(doc[i+2:i+6]) == "0000" {
				out = append(out, doc[last:i]...)
				out = append(out, `\ufffd`...)
				last = i + 6
				i += 5
				continue
			}
			i++ // skip the escaped character, a quote or a backslash included
		}
	}
	if out == nil {
		return doc, changed
	}
	return append(out, doc[last:]...), true
}

// Cut returns s cut to at most n bytes on a character boundary, with "…" appended when it
// was cut (the mark is not counted in n).
func Cut(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// CutPlain is Cut without the mark: at most n bytes, on a character boundary.
func CutPlain(s string, n int) string {
	if n < 0 {
		n = 0
	}
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
