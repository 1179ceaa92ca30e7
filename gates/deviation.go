package gates

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// Deviation behaviours: each names a place where servers in the field depart from one era's
// rules. The observed value says what this server did; Matches names the era whose rule it
// follows ("" when neither, or when not observed).
const (
	DevToolErrorStatus     = "tool_error_status"      // isError ends failed (2025-11-25) or completed (extension)
	DevRequestedTTL        = "requested_ttl"          // honoured, capped, ignored, replaced
	DevPollInterval        = "poll_interval"          // present or absent
	DevSessionBound        = "task_ids_session_bound" // a task is (not) readable from another session
	DevToolsCallCapability = "tasks_requests_tools"   // with or without call
	DevCancelOnRequestEnd  = "cancel_on_request_end"  // tasks cancelled when the creating request ends
	DevUnknownSession      = "unknown_session_status" // 404 (rule) or 400
	DevUpdateDropsAnswer   = "update_drops_answer"    // tasks/update accepts and silently drops an answer
)

// NotObserved is the value of a behaviour a run could not observe.
const NotObserved = "not observed"

// Deviation is one behaviour as observed.
type Deviation struct {
	// Observed is what the server did, in words ("failed", "capped to 5m0s", "absent").
	Observed string `json:"observed"`
	// Matches is the era whose rule the behaviour follows ("2025-11-25", "2026-07-28"),
	// "neither", or "" when not observed or when it is not an era difference.
	Matches string `json:"matches,omitempty"`
	// Deviates is true when the behaviour breaks the rules of the server's own era.
	Deviates bool `json:"deviates"`
}

// Deviations maps behaviour → observation.
type Deviations map[string]Deviation

func (d Deviations) set(name, observed, matches string, deviates bool) {
	d[name] = Deviation{Observed: inert(observed, 120), Matches: matches, Deviates: deviates}
}

// Names returns the behaviours in order.
func (d Deviations) Names() []string {
	out := make([]string, 0, len(d))
	for k := range d {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Fingerprint is a hash of the canonical form (sorted behaviour=observed|matches lines).
func (d Deviations) Fingerprint() string {
	var sb strings.Builder
	for _, k := range d.Names() {
		v := d[k]
		sb.WriteString(k + "=" + v.Observed + "|" + v.Matches + "\n")
	}
	h := sha256.Sum256([]byte(sb.String()))
	return "dev:" + hex.EncodeToString(h[:])
}

// DeviationChange is one behaviour that differs between two runs.
type DeviationChange struct {
	Behaviour string `json:"behaviour"`
	Before    string `json:"before"`
	After     string `json:"after"`
}

// DiffDeviations lists the behaviours whose observation changed from before to after.
func DiffDeviations(before, after Deviations) []DeviationChange {
	names := map[string]bool{}
	for k := range before {
		names[k] = true
	}
	for k := range after {
		names[k] = true
	}
	var keys []string
	for k := range names {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []DeviationChange
	for _, k := range keys {
		b, okb := before[k]
		a, oka := after[k]
		bs, as := b.Observed, a.Observed
		if !okb {
			bs = "absent"
		}
		if !oka {
			as = "absent"
		}
		if bs != as || b.Matches != a.Matches {
			out = append(out, DeviationChange{Behaviour: k, Before: bs, After: as})
		}
	}
	return out
}
