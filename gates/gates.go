// Package gates produces the evidence that a server's MCP Tasks can be trusted before a
// rollout moves: it runs deterministic suites (contract, fault, security, load, recovery,
// cancellation, compatibility) against a real server through the fault proxy, records every
// case with what it saw, derives the server's deviation fingerprint (how it departs from each
// era's rules), and binds the run's verdict to the manifest fingerprint, the deviation
// fingerprint, Taskgate's build and the rollout's pins. Runs are stored in PostgreSQL; a change
// of any binding voids the verdicts and queues a new run, which one replica takes under a lease.
package gates

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/taskgate/taskgate/gates/faultproxy"
)

// Suite names a group of cases.
type Suite string

// The suites, in the order a run executes them.
const (
	SuiteContract      Suite = "contract"
	SuiteFault         Suite = "fault"
	SuiteSecurity      Suite = "security"
	SuiteLoad          Suite = "load"
	SuiteRecovery      Suite = "recovery"
	SuiteCancellation  Suite = "cancellation"
	SuiteCompatibility Suite = "compatibility"
)

// Suites lists every suite in run order.
var Suites = []Suite{SuiteContract, SuiteFault, SuiteSecurity, SuiteLoad, SuiteRecovery, SuiteCancellation, SuiteCompatibility}

// ParseSuite checks a suite name.
func ParseSuite(s string) (Suite, error) {
	if slices.Contains(Suites, Suite(s)) {
		return Suite(s), nil
	}
	return "", &SuiteError{Name: s}
}

// SuiteError is an unknown suite name.
type SuiteError struct{ Name string }

func (e *SuiteError) Error() string {
	names := make([]string, len(Suites))
	for i, s := range Suites {
		names[i] = string(s)
	}
	return "unknown suite " + quoteBounded(e.Name) + " (want one of " + strings.Join(names, ", ") + ")"
}

// Verdict is how a case, or a run, ended.
type Verdict string

const (
	// Pass: the server behaved as the rules require.
	Pass Verdict = "pass"
	// Fail: the server broke a rule (the reason says which).
	Fail Verdict = "fail"
	// Inconclusive: the case could not decide (no target, no second identity, no verifier,
	// the era has no such feature); the reason says why.
	Inconclusive Verdict = "inconclusive"
)

// Hard-gate kinds: a failed case of one of these fails the run whatever else passed.
const (
	HardCrossIdentity     = "cross_identity_access"
	HardInvalidTransition = "invalid_transition_accepted"
	HardDuplicateEffect   = "duplicate_effect"
	HardSecretLeaked      = "secret_leaked"
	HardRepeatedCall      = "repeated_call"
)

// Evidence is what a case saw: the messages through the proxy (bounded, no payloads),
// timings and notes.
type Evidence struct {
	// Messages are the JSON-RPC messages of the case, as the fault proxy logged them.
	Messages []faultproxy.Message `json:"messages,omitempty"`
	// Timings are named durations in milliseconds (e.g. "create", "to_terminal").
	Timings map[string]int64 `json:"timings_ms,omitempty"`
	// Notes are short, sanitised observations ("task t1 working → completed").
	Notes []string `json:"notes,omitempty"`
}

// Case is one case's result.
type Case struct {
	// Suite and Name identify the case ("contract", "create-get-result").
	Suite Suite  `json:"suite"`
	Name  string `json:"name"`
	// Verdict is pass, fail or inconclusive.
	Verdict Verdict `json:"verdict"`
	// Reason says why, in words.
	Reason string `json:"reason"`
	// Hard names the hard gate the case guards ("" = none); a failure of a hard case fails
	// the run.
	Hard string `json:"hard,omitempty"`
	// Started and Duration time the case.
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration"`
	// Evidence is what the case saw.
	Evidence Evidence `json:"evidence"`
}

// HardFailure reports whether the case failed a hard gate.
func (c Case) HardFailure() bool { return c.Verdict == Fail && c.Hard != "" }

// Binding is what a verdict is valid for.
type Binding struct {
	// Workflow is the workflow whose gate target was tested ("" for an ad-hoc run).
	Workflow string `json:"workflow"`
	// Server is the server name or URL tested.
	Server string `json:"server"`
	// ManifestFingerprint is the capability manifest's fingerprint at the run.
	ManifestFingerprint string `json:"manifest_fingerprint"`
	// DeviationFingerprint is the run's deviation fingerprint.
	DeviationFingerprint string `json:"deviation_fingerprint"`
	// Build is Taskgate's build.
	Build string `json:"build"`
	// Pins are the rollout's pins (name → value), e.g. the server version pinned.
	Pins map[string]string `json:"pins,omitempty"`
}

// PinsKey is the canonical text of the pins (sorted name=value lines).
func (b Binding) PinsKey() string {
	keys := make([]string, 0, len(b.Pins))
	for k := range b.Pins {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(k + "=" + b.Pins[k] + "\n")
	}
	return sb.String()
}

// Run is one gate run: its binding, cases, deviations and verdict.
type Run struct {
	// ID is the stored run's id (0 until stored).
	ID int64 `json:"id"`
	Binding
	// StartedBy is who started the run ("cli", a console user, "queue").
	StartedBy string `json:"started_by"`
	// Era and ServerName/ServerVersion are what the server said it is.
	Era           string `json:"era"`
	ServerName    string `json:"server_name,omitempty"`
	ServerVersion string `json:"server_version,omitempty"`
	// Started and Finished time the run.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Cases are the results in run order.
	Cases []Case `json:"cases"`
	// Deviations is the server's deviation fingerprint in full.
	Deviations Deviations `json:"deviations"`
	// Verdict is fail when any case failed (a hard-gate failure always fails it), pass when
	// at least one case passed and none failed, inconclusive otherwise.
	Verdict Verdict `json:"verdict"`
	// HardFailures names the hard gates failed.
	HardFailures []string `json:"hard_failures,omitempty"`
	// Error is set when the run could not reach the server at all.
	Error string `json:"error,omitempty"`
}

// Counts returns the number of passed, failed and inconclusive cases.
func (r *Run) Counts() (pass, fail, inconclusive int) {
	for _, c := range r.Cases {
		switch c.Verdict {
		case Pass:
			pass++
		case Fail:
			fail++
		default:
			inconclusive++
		}
	}
	return
}

// decide sets the run's verdict and hard failures from its cases.
func (r *Run) decide() {
	p, f, _ := r.Counts()
	r.HardFailures = nil
	for _, c := range r.Cases {
		if c.HardFailure() && !slices.Contains(r.HardFailures, c.Hard) {
			r.HardFailures = append(r.HardFailures, c.Hard)
		}
	}
	switch {
	case f > 0 || r.Error != "":
		r.Verdict = Fail
	case p > 0:
		r.Verdict = Pass
	default:
		r.Verdict = Inconclusive
	}
}

// Errors of the package.
var (
	// ErrNotFound is returned for an unknown run.
	ErrNotFound = errors.New("gates: not found")
	// ErrNoTarget is returned when a run names no server.
	ErrNoTarget = errors.New("gates: no server to test")
	// ErrLeased is returned when another replica holds the queue lease.
	ErrLeased = errors.New("gates: queue item leased by another replica")
)

// maxNote bounds one note or reason; server text inside is made inert (control and
// invisible characters removed) and cut.
const maxNote = 300

// inert returns s with control, bidirectional-override and zero-width characters removed and
// invalid UTF-8 replaced, cut to n bytes.
func inert(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(' ')
		case unicode.IsControl(r), unicode.Is(unicode.Cf, r), r == '\u2028', r == '\u2029':
		default:
			b.WriteRune(r)
		}
		if b.Len() >= n {
			break
		}
	}
	out := b.String()
	for len(out) > n {
		_, size := utf8.DecodeLastRuneInString(out)
		out = out[:len(out)-size]
	}
	return out
}

func quoteBounded(s string) string {
	b, _ := json.Marshal(inert(s, 80))
	return string(b)
}
