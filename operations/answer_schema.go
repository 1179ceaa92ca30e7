package operations

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/taskgate/taskgate/internal/safetext"
)

// Bounds on what is kept of a server's requested schema. A schema beyond them is not refused
// as a whole: what is kept is cut to them, and the question says so.
const (
	// MaxSchemaBytes is the largest requested schema kept verbatim.
	MaxSchemaBytes = 64 << 10
	// MaxInputMessage is the longest question message kept, in bytes.
	MaxInputMessage = 1024
	maxSchemaFields = 100
	maxChoices      = 200
	maxFieldName    = 128
	maxTitle        = 200
	maxDescription  = 1000
	maxChoiceValue  = 500
	maxDefaultBytes = 4 << 10
	maxSchemaDepth  = 16
)

// Choice is one allowed value of a single- or multi-select field, with its title when the
// schema gives one.
type Choice struct {
	Value string `json:"value"`
	Title string `json:"title,omitempty"`
}

// Field formats the elicitation schema allows for strings.
var stringFormats = map[string]bool{"email": true, "uri": true, "date": true, "date-time": true}

// parseRequestedSchema reads a form elicitation's requested schema (a flat object of
// primitive properties: strings with length and format, numbers and integers with bounds,
// booleans, single-select enums untitled, titled with oneOf or legacy with enumNames, and
// multi-select arrays of those) into fields with the question's title and description.
// Keywords of the wrong type are ignored and noted on the field; a schema that is not an
// object with properties is an error.
func parseRequestedSchema(raw json.RawMessage) (title, description string, fields []Field, err error) {
	if len(raw) > MaxSchemaBytes {
		return "", "", nil, fmt.Errorf("the requested schema is over %d bytes", MaxSchemaBytes)
	}
	if d := jsonDepth(raw); d > maxSchemaDepth {
		return "", "", nil, fmt.Errorf("the requested schema nests %d levels deep (at most %d)", d, maxSchemaDepth)
	}
	var top struct {
		Type        json.RawMessage            `json:"type"`
		Title       json.RawMessage            `json:"title"`
		Description json.RawMessage            `json:"description"`
		Properties  map[string]json.RawMessage `json:"properties"`
		Required    json.RawMessage            `json:"required"`
	}
	if err := json.Unmarshal(raw, &top); err != nil {
		return "", "", nil, fmt.Errorf("the requested schema is not a JSON object: %w", err)
	}
	if t, ok := jsonString(top.Type); len(top.Type) > 0 && (!ok || t != "object") {
		return "", "", nil, errors.New(`the requested schema's type is not "object"`)
	}
	title, _ = jsonString(top.Title)
	description, _ = jsonString(top.Description)
	title, description = sanitize(title, maxTitle), sanitize(description, maxDescription)
	required := map[string]bool{}
	var req []json.RawMessage
	_ = json.Unmarshal(top.Required, &req)
	for _, r := range req {
		if n, ok := jsonString(r); ok {
			required[n] = true
		}
	}
	names := make([]string, 0, len(top.Properties))
	for n := range top.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	dropped := 0
	for _, n := range names {
		if len(fields) == maxSchemaFields {
			dropped = len(names) - maxSchemaFields
			break
		}
		if !usableName(n) {
			return "", "", nil, fmt.Errorf("a property name of the requested schema is not 1 to %d printable characters", maxFieldName)
		}
		fields = append(fields, parseField(n, required[n], top.Properties[n]))
	}
	for n := range required {
		if _, ok := top.Properties[n]; !ok && usableName(n) && len(fields) < maxSchemaFields {
			// A required name without a property: any value is taken, but one must be given.
			fields = append(fields, Field{Name: n, Required: true, Unchecked: "the schema requires it without describing it"})
		}
	}
	if dropped > 0 {
		description = strings.TrimSpace(description + fmt.Sprintf(" (%d more fields were not kept)", dropped))
	}
	sort.SliceStable(fields, func(i, j int) bool { return fields[i].Name < fields[j].Name })
	return title, description, fields, nil
}

func usableName(n string) bool {
	if n == "" || len(n) > maxFieldName || !utf8.ValidString(n) {
		return false
	}
	for _, r := range n {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return false
		}
	}
	return true
}

// propSchema is one property of a requested schema, every keyword kept raw so a keyword of
// the wrong type is ignored rather than failing the whole schema.
type propSchema struct {
	Type        json.RawMessage `json:"type"`
	Title       json.RawMessage `json:"title"`
	Description json.RawMessage `json:"description"`
	Format      json.RawMessage `json:"format"`
	MinLength   json.RawMessage `json:"minLength"`
	MaxLength   json.RawMessage `json:"maxLength"`
	Minimum     json.RawMessage `json:"minimum"`
	Maximum     json.RawMessage `json:"maximum"`
	Enum        json.RawMessage `json:"enum"`
	EnumNames   json.RawMessage `json:"enumNames"`
	OneOf       json.RawMessage `json:"oneOf"`
	AnyOf       json.RawMessage `json:"anyOf"`
	Items       json.RawMessage `json:"items"`
	MinItems    json.RawMessage `json:"minItems"`
	MaxItems    json.RawMessage `json:"maxItems"`
	Default     json.RawMessage `json:"default"`
}

func parseField(name string, required bool, raw json.RawMessage) Field {
	f := Field{Name: name, Required: required}
	var p propSchema
	var notes []string
	note := func(s string) { notes = append(notes, s) }
	if err := json.Unmarshal(raw, &p); err != nil {
		f.Unchecked = "the schema of this field is not an object"
		return f
	}
	if t, ok := jsonString(p.Type); ok {
		f.Type = safetext.CutPlain(t, 32)
	} else if len(p.Type) > 0 {
		note("type is not a string")
	}
	if t, ok := jsonString(p.Title); ok {
		f.Title = sanitize(t, maxTitle)
	}
	if d, ok := jsonString(p.Description); ok {
		f.Description = sanitize(d, maxDescription)
	}
	switch f.Type {
	case "string":
		if fm, ok := jsonString(p.Format); ok {
			if stringFormats[fm] {
				f.Format = fm
			} else {
				note("format " + safetext.Cut(sanitize(fm, 40), 40) + " is not checked")
			}
		}
		f.MinLength, f.MaxLength = count(p.MinLength, "minLength", note), count(p.MaxLength, "maxLength", note)
		f.Choices = choices(p, note)
	case "number", "integer":
		f.Minimum, f.Maximum = bound(p.Minimum, "minimum", note), bound(p.Maximum, "maximum", note)
	case "boolean":
	case "array":
		f.Multiple = true
		var items propSchema
		if len(p.Items) == 0 || json.Unmarshal(p.Items, &items) != nil {
			note("items are not described")
		} else {
			f.Choices = choices(items, note)
		}
		if len(f.Choices) == 0 {
			note("no allowed choices for the items")
		}
		f.MinItems, f.MaxItems = count(p.MinItems, "minItems", note), count(p.MaxItems, "maxItems", note)
	default:
		note("type " + sanitize(f.Type, 32) + " is not one the elicitation schema allows")
	}
	if len(p.Default) > 0 && string(p.Default) != "null" {
		switch {
		case len(p.Default) > maxDefaultBytes:
			note("the default is too large to use")
		case f.defaultFits(p.Default):
			f.Default = compactJSON(p.Default)
		default:
			note("the default does not fit the field")
		}
	}
	if len(notes) > 0 {
		f.Unchecked = safetext.Cut(strings.Join(notes, "; "), 300)
	}
	return f
}

// defaultFits reports whether a schema's default is a value the field itself accepts.
func (f Field) defaultFits(raw json.RawMessage) bool {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return false
	}
	return f.problem(normalizeValue(v)) == ""
}

// choices reads the allowed values of a string or of array items: enum (with legacy
// enumNames as titles), oneOf or anyOf of {const, title}.
func choices(p propSchema, note func(string)) []Choice {
	var out []Choice
	add := func(v, title string) {
		if len(out) == maxChoices {
			return
		}
		out = append(out, Choice{Value: safetext.CutPlain(v, maxChoiceValue), Title: sanitize(title, maxTitle)})
	}
	if len(p.Enum) > 0 {
		var vals, titles []json.RawMessage
		if json.Unmarshal(p.Enum, &vals) != nil {
			note("enum is not a list")
		}
		_ = json.Unmarshal(p.EnumNames, &titles)
		for i, v := range vals {
			s, ok := jsonString(v)
			if !ok {
				note("an enum value is not a string")
				continue
			}
			t := ""
			if i < len(titles) {
				t, _ = jsonString(titles[i])
			}
			add(s, t)
		}
	}
	for _, list := range []json.RawMessage{p.OneOf, p.AnyOf} {
		if len(list) == 0 {
			continue
		}
		var opts []struct {
			Const json.RawMessage `json:"const"`
			Title json.RawMessage `json:"title"`
		}
		if json.Unmarshal(list, &opts) != nil {
			note("oneOf/anyOf is not a list of {const, title}")
			continue
		}
		for _, o := range opts {
			s, ok := jsonString(o.Const)
			if !ok {
				note("a choice's const is not a string")
				continue
			}
			t, _ := jsonString(o.Title)
			add(s, t)
		}
	}
	if len(out) == maxChoices {
		note(fmt.Sprintf("only the first %d choices are kept", maxChoices))
	}
	return out
}

func count(raw json.RawMessage, kw string, note func(string)) *int {
	if len(raw) == 0 {
		return nil
	}
	var n float64
	if json.Unmarshal(raw, &n) != nil || n < 0 || n != math.Trunc(n) || n > math.MaxInt32 {
		note(kw + " is not a whole number from 0")
		return nil
	}
	i := int(n)
	return &i
}

func bound(raw json.RawMessage, kw string, note func(string)) *float64 {
	if len(raw) == 0 {
		return nil
	}
	var n float64
	if json.Unmarshal(raw, &n) != nil {
		note(kw + " is not a number")
		return nil
	}
	return &n
}

func jsonString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

func compactJSON(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return nil
	}
	out, _ := safetext.CleanJSON(b.Bytes())
	return out
}

// jsonDepth returns how deeply arrays and objects nest in doc, not counting brackets inside
// strings; it stops counting once past maxSchemaDepth.
func jsonDepth(doc []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > deepest {
				deepest = depth
				if deepest > maxSchemaDepth {
					return deepest
				}
			}
		case '}', ']':
			depth--
		}
	}
	return deepest
}
