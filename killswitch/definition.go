// Package killswitch holds Taskgate's feature flags and the kill switch of new Task starts.
//
// Flags are defined in flagd's flag-definition format (state, variants, defaultVariant,
// targeting in JsonLogic with flagd's fractional, sem_ver, starts_with and ends_with operators
// and shared $evaluators), kept in PostgreSQL with their history, cached in memory on every
// replica (LISTEN/NOTIFY plus a periodic resync) and served through an OpenFeature provider and
// the OpenFeature Remote Evaluation Protocol. The kill switch is the flag NewTaskStarts, whose
// definition the switches of each workflow, server and the global one generate.
package killswitch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// ErrInvalid wraps every rejected flag definition or argument.
var ErrInvalid = errors.New("killswitch: invalid")

// Flag states of the flagd format.
const (
	StateEnabled  = "ENABLED"
	StateDisabled = "DISABLED"
)

// Flag is one flag definition in flagd's format.
type Flag struct {
	State          string          `json:"state"`
	Variants       map[string]any  `json:"variants"`
	DefaultVariant *string         `json:"defaultVariant,omitempty"`
	Targeting      json.RawMessage `json:"targeting,omitempty"`
	Metadata       map[string]any  `json:"metadata,omitempty"`
}

// Document is a flagd flag-definition file: the flags and the shared evaluators their
// targeting refers to with {"$ref": name}.
type Document struct {
	Schema     string                     `json:"$schema,omitempty"`
	Flags      map[string]Flag            `json:"flags"`
	Evaluators map[string]json.RawMessage `json:"$evaluators,omitempty"`
	Metadata   map[string]any             `json:"metadata,omitempty"`
}

// SchemaURL is the flagd schema a exported document names.
const SchemaURL = "https://flagd.dev/schema/v0/flags.json"

var keyPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$`)

// ValidKey reports whether key can name a flag or an evaluator.
func ValidKey(key string) bool { return keyPattern.MatchString(key) }

// ParseDocument reads a flagd JSON document and validates every flag in it.
func ParseDocument(data []byte) (Document, error) {
	var doc Document
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return Document{}, fmt.Errorf("%w: flag document: %v", ErrInvalid, err)
	}
	if doc.Flags == nil {
		return Document{}, fmt.Errorf("%w: flag document has no \"flags\" object", ErrInvalid)
	}
	for name, ev := range doc.Evaluators {
		if !ValidKey(name) {
			return Document{}, fmt.Errorf("%w: evaluator name %q", ErrInvalid, name)
		}
		if len(bytes.TrimSpace(ev)) < 3 {
			return Document{}, fmt.Errorf("%w: evaluator %q is empty", ErrInvalid, name)
		}
	}
	for _, key := range sortedKeys(doc.Flags) {
		f := doc.Flags[key]
		normaliseNumbers(&f)
		doc.Flags[key] = f
		if err := f.Validate(key); err != nil {
			return Document{}, err
		}
	}
	return doc, nil
}

// ParseFlag reads one flag definition and validates it.
func ParseFlag(key string, data []byte) (Flag, error) {
	var f Flag
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return Flag{}, fmt.Errorf("%w: flag %s: %v", ErrInvalid, key, err)
	}
	normaliseNumbers(&f)
	if err := f.Validate(key); err != nil {
		return Flag{}, err
	}
	return f, nil
}

// normaliseNumbers turns JSON numbers of variants into float64 (as encoding/json gives them
// elsewhere), keeping integers recognisable for integer evaluation.
func normaliseNumbers(f *Flag) {
	for k, v := range f.Variants {
		f.Variants[k] = fromNumbers(v)
	}
}

func fromNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		fl, _ := x.Float64()
		return fl
	case map[string]any:
		for k, e := range x {
			x[k] = fromNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = fromNumbers(e)
		}
	}
	return v
}

// Validate checks f the way flagd does: a known state, at least one variant, a default variant
// that is one of them (or none), and targeting that is a JSON object.
func (f Flag) Validate(key string) error {
	if !ValidKey(key) {
		return fmt.Errorf("%w: flag key %q (letters, digits and . _ : / -, at most 200)", ErrInvalid, key)
	}
	if f.State != StateEnabled && f.State != StateDisabled {
		return fmt.Errorf("%w: flag %s: state must be ENABLED or DISABLED, not %q", ErrInvalid, key, f.State)
	}
	if len(f.Variants) == 0 {
		return fmt.Errorf("%w: flag %s has no variants", ErrInvalid, key)
	}
	if f.DefaultVariant != nil && *f.DefaultVariant != "" {
		if _, ok := f.Variants[*f.DefaultVariant]; !ok {
			return fmt.Errorf("%w: flag %s: default variant %q is not one of its variants", ErrInvalid, key, *f.DefaultVariant)
		}
	}
	if t := bytes.TrimSpace(f.Targeting); len(t) > 0 && !bytes.Equal(t, []byte("null")) && t[0] != '{' {
		return fmt.Errorf("%w: flag %s: targeting must be a JsonLogic object", ErrInvalid, key)
	}
	return nil
}

// resolveRefs replaces every {"$ref": name} in targeting by the evaluator's rule, as flagd does
// on a whitespace-normalised form of the rule.
func resolveRefs(targeting json.RawMessage, evaluators map[string]json.RawMessage) (json.RawMessage, error) {
	if len(targeting) == 0 {
		return targeting, nil
	}
	norm, err := compactJSON(targeting)
	if err != nil {
		return nil, err
	}
	s := string(norm)
	for _, name := range sortedKeys(evaluators) {
		ev, err := compactJSON(evaluators[name])
		if err != nil {
			return nil, fmt.Errorf("evaluator %s: %w", name, err)
		}
		ref, _ := json.Marshal(map[string]string{"$ref": name})
		s = strings.ReplaceAll(s, string(ref), string(ev))
	}
	return json.RawMessage(s), nil
}

func compactJSON(raw json.RawMessage) ([]byte, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
