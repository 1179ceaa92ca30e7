package killswitch

import (
	"fmt"
	"math"
)

// Kind is the type a caller asks a flag for.
type Kind string

// Kinds of flag values.
const (
	KindBool   Kind = "boolean"
	KindString Kind = "string"
	KindInt    Kind = "integer"
	KindFloat  Kind = "float"
	KindObject Kind = "object"
)

// Typed converts an evaluation to kind, answering def (the caller's default) when the flag gave
// no value or could not be evaluated, and a TYPE_MISMATCH error when the variant's value is of
// another type.
func Typed(r Result, kind Kind, def any) Result {
	if r.ErrorCode != "" || r.NoValue {
		r.Value = def
		return r
	}
	mismatch := func() Result {
		r.ErrorMessage = fmt.Sprintf("flag %s is not a %s flag (variant %q holds %T)", r.Key, kind, r.Variant, r.Value)
		r.Value, r.Reason, r.ErrorCode = def, ReasonError, ErrorTypeMismatch
		return r
	}
	switch kind {
	case KindBool:
		if _, ok := r.Value.(bool); !ok {
			return mismatch()
		}
	case KindString:
		if _, ok := r.Value.(string); !ok {
			return mismatch()
		}
	case KindFloat:
		if _, ok := r.Value.(float64); !ok {
			return mismatch()
		}
	case KindInt:
		f, ok := r.Value.(float64)
		if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return mismatch()
		}
		r.Value = int64(f)
	case KindObject:
		switch r.Value.(type) {
		case map[string]any, []any:
		default:
			return mismatch()
		}
	default:
		return mismatch()
	}
	return r
}
