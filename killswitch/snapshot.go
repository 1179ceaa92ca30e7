package killswitch

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"
)

// Snapshot is an immutable set of compiled flags, as loaded at one moment.
type Snapshot struct {
	flags      map[string]compiled
	defs       map[string]Flag
	evaluators map[string]json.RawMessage
	// Version is the highest flag change id the snapshot includes.
	Version int64
	// ETag identifies the definitions' content.
	ETag string
}

func newSnapshot(flags map[string]Flag, evaluators map[string]json.RawMessage, version int64) *Snapshot {
	s := &Snapshot{flags: make(map[string]compiled, len(flags)), defs: flags, evaluators: evaluators, Version: version}
	for k, f := range flags {
		s.flags[k] = compile(k, f, evaluators)
	}
	body, _ := json.Marshal(struct {
		F map[string]Flag
		E map[string]json.RawMessage
	}{flags, evaluators})
	sum := sha256.Sum256(body)
	s.ETag = `"` + hex.EncodeToString(sum[:12]) + `"`
	return s
}

// Evaluate resolves key for evalCtx; a missing flag is FLAG_NOT_FOUND.
func (s *Snapshot) Evaluate(key string, evalCtx map[string]any, now time.Time) Result {
	c, ok := s.flags[key]
	if !ok {
		return Result{Key: key, Reason: ReasonError, ErrorCode: ErrorFlagNotFound, ErrorMessage: fmt.Sprintf("flag %s is not defined", key)}
	}
	return c.evaluate(evalCtx, now)
}

// Keys lists the flag keys in order.
func (s *Snapshot) Keys() []string { return sortedKeys(s.defs) }

// Definition returns a flag's definition.
func (s *Snapshot) Definition(key string) (Flag, bool) {
	f, ok := s.defs[key]
	return f, ok
}

// Document returns the snapshot as a flagd document.
func (s *Snapshot) Document() Document {
	return Document{Schema: SchemaURL, Flags: s.defs, Evaluators: s.evaluators}
}
