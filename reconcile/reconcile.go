// Package reconcile settles operations whose real outcome Taskgate does not know.
//
// Unknown is not failed. After every terminal task, sync answer and job-API answer the
// workflow's outcome verifier asks the system of record by idempotency key (the operation id)
// under the workflow's reconciliation budget: an HTTP lookup (GET {base}/{key} → applied,
// not_applied or unknown, with a receipt), the incumbent job API's status, or none (manual
// only). A confirmed answer sets the domain outcome and is stored with its receipt and source;
// anything else opens a reconciliation item with its reason.
//
// A workflow whose verifier is none has nobody but a person to confirm its effect: once its
// task, sync call or job ends, its outcome is unverified (listed and filterable, no item), or,
// when its policy asks for manual verification (verifier.manual), a manual_verification item is
// opened for a person at once (the outcome becomes unknown). A read-only workflow has no effect
// to confirm: its outcome becomes no_effect and its timeline says "no effect to verify".
//
// Items are re-verified automatically with exponential backoff first; only when that does not
// settle them are they handed to a person. Support staff claim an item (a lease that expires,
// shown in every list; a competing claim is refused with ErrClaimed, never overwritten), and
// resolve it with an outcome (applied, not_applied, compensated, duplicate), a resolution
// reason from an extensible list, a required note and an evidence link. A retry is offered
// only after not_applied and reuses the operation's idempotency key, so it can never cause a
// second effect. Bulk actions select items by filter, show a preview count, need a typed
// confirmation and run as one audited batch. Everything is tenant-scoped and audited.
//
// The package does not import the operations package: the ledger opens items through OpenTx
// inside its own transactions, and retries go back through the ledger's start path by the
// Retrier interface.
package reconcile

import (
	"errors"
	"slices"
	"time"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound: no such item, or not in the caller's tenant scope.
	ErrNotFound = errors.New("reconciliation item not found")
	// ErrClaimed: another person holds an unexpired claim on the item.
	ErrClaimed = errors.New("reconciliation item is claimed by someone else")
	// ErrNotClaimed: the action needs the caller's own unexpired claim.
	ErrNotClaimed = errors.New("reconciliation item is not claimed by you")
	// ErrClosed: the item is already settled or resolved.
	ErrClosed = errors.New("reconciliation item is closed")
	// ErrInvalid: a resolution or filter is incomplete or malformed.
	ErrInvalid = errors.New("invalid reconciliation request")
	// ErrRetryNotAllowed: a retry is offered only after a not_applied outcome, once.
	ErrRetryNotAllowed = errors.New("retry is allowed only after not_applied")
	// ErrConfirmation: the typed confirmation of a bulk action does not match.
	ErrConfirmation = errors.New("typed confirmation does not match")
)

// Reason says why an item was opened.
type Reason = string

// Reasons an item is opened for. The first group comes from the ledger and the watchers; the
// rest from the verifiers and the handoff route.
const (
	ReasonCreateUnacknowledged    Reason = "create_unacknowledged"
	ReasonSyncTimeout             Reason = "sync_timeout"
	ReasonSyncTransportLost       Reason = "sync_transport_lost"
	ReasonJobUnacknowledged       Reason = "job_submit_unacknowledged"
	ReasonTaskUnobservable        Reason = "task_unobservable"
	ReasonTaskExpired             Reason = "task_expired"
	ReasonSessionGone             Reason = "session_gone"
	ReasonResultUnavailable       Reason = "result_unavailable"
	ReasonTaskFailedUnverified    Reason = "task_failed_unverified"
	ReasonTaskCancelledUnverified Reason = "task_cancelled_unverified"
	ReasonVerifierUnknown         Reason = "verifier_unknown"
	ReasonTaskDomainMismatch      Reason = "task_domain_mismatch"
	ReasonHumanHandoff            Reason = "human_handoff"
	// ReasonManualVerification: the workflow has no verifier (none, manual only) and its
	// effect may have happened; a person confirms the outcome.
	ReasonManualVerification Reason = "manual_verification"
	// ReasonCallUnrecorded: the call was sent and its answer was never recorded (the ledger
	// could not write it); the recovery sweep found it.
	ReasonCallUnrecorded Reason = "call_unrecorded"
	// ReasonServerTextReplaced: the server's answer held text PostgreSQL cannot store (NUL,
	// invalid UTF-8); the kept record has it replaced and is not verbatim.
	ReasonServerTextReplaced Reason = "server_text_replaced"
)

// reasonText says each reason in words for the console.
var reasonText = map[Reason]string{
	ReasonCreateUnacknowledged:    "Task creation unacknowledged: the call may have started; it is never resent",
	ReasonSyncTimeout:             "Synchronous call timed out: the effect may have happened",
	ReasonSyncTransportLost:       "Synchronous call lost its connection: the effect may have happened",
	ReasonJobUnacknowledged:       "Job submission unanswered: the job may exist",
	ReasonTaskUnobservable:        "Task unobservable: status reads kept failing; effect unverified",
	ReasonTaskExpired:             "Task expired before a terminal status; effect unverified",
	ReasonSessionGone:             "The server forgot the session that owned the task; effect unverified",
	ReasonResultUnavailable:       "The task's outcome could not be fetched; effect unverified",
	ReasonTaskFailedUnverified:    "Task failed; effect unverified",
	ReasonTaskCancelledUnverified: "Task cancelled; effect unverified",
	ReasonVerifierUnknown:         "The system of record answered unknown",
	ReasonTaskDomainMismatch:      "Task state and verified outcome disagree",
	ReasonHumanHandoff:            "Handed to a person by the workflow",
	ReasonManualVerification:      "No outcome verifier for this workflow: a person confirms whether the effect happened",
	ReasonCallUnrecorded:          "The call was sent but its answer was never recorded: the effect may have happened; it is never resent",
	ReasonServerTextReplaced:      "The server's answer held text that cannot be stored (NUL or invalid UTF-8); the kept record is not verbatim",
}

// ValidID reports whether id has the form of an item's public id (a UUID in its canonical
// text form). Anything else, old numeric ids among them, names no item.
func ValidID(id string) bool {
	if len(id) != 36 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		default:
			return false
		}
	}
	return true
}

// Reasons lists every reason code in the order the console offers them as a filter.
func Reasons() []Reason {
	return []Reason{ReasonCreateUnacknowledged, ReasonSyncTimeout, ReasonSyncTransportLost, ReasonJobUnacknowledged,
		ReasonTaskUnobservable, ReasonTaskExpired, ReasonSessionGone, ReasonResultUnavailable, ReasonTaskFailedUnverified,
		ReasonTaskCancelledUnverified, ReasonVerifierUnknown, ReasonTaskDomainMismatch, ReasonHumanHandoff, ReasonManualVerification,
		ReasonCallUnrecorded, ReasonServerTextReplaced}
}

// ReasonText returns a reason in words; an unknown code is returned as it is.
func ReasonText(r Reason) string {
	if s, ok := reasonText[r]; ok {
		return s
	}
	return r
}

// State is where an item stands.
type State string

// Item states. verifying: re-verified automatically with backoff; needs_person: a person must
// settle it; settled: a verifier answered; resolved: a person resolved it.
const (
	StateVerifying   State = "verifying"
	StateNeedsPerson State = "needs_person"
	StateSettled     State = "settled"
	StateResolved    State = "resolved"
)

// Outcome is a resolution or a verifier's answer.
type Outcome string

// Outcomes. A verifier answers applied, not_applied or unknown; a person resolves with
// applied, not_applied, compensated or duplicate (this operation added no effect of its own:
// the effect belongs to another operation).
const (
	OutcomeApplied     Outcome = "applied"
	OutcomeNotApplied  Outcome = "not_applied"
	OutcomeCompensated Outcome = "compensated"
	OutcomeDuplicate   Outcome = "duplicate"
	OutcomeUnknown     Outcome = "unknown"
)

// Domain outcomes set without a verifier's answer: read-only work has no effect to verify;
// work of a workflow without a verifier (and without manual verification) ends unverified.
const (
	OutcomeNoEffect   = "no_effect"
	OutcomeUnverified = "unverified"
)

// Resolutions are the outcomes a person may resolve with.
var Resolutions = []Outcome{OutcomeApplied, OutcomeNotApplied, OutcomeCompensated, OutcomeDuplicate}

// domainOutcome is the ledger's domain outcome for a resolution: a duplicate added no effect
// of its own.
func domainOutcome(o Outcome) string {
	if o == OutcomeDuplicate {
		return string(OutcomeNotApplied)
	}
	return string(o)
}

// BuiltinResolutionReasons are the resolution reasons every console offers; the policy's
// resolution_reasons extend them.
var BuiltinResolutionReasons = []string{
	"verified in the system of record",
	"compensating action taken",
	"duplicate of another operation",
	"confirmed by the owning team",
}

// ResolutionReasons returns the built-in reasons followed by the configured ones, without
// repeats.
func ResolutionReasons(configured []string) []string {
	out := slices.Clone(BuiltinResolutionReasons)
	for _, r := range configured {
		if r != "" && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// Scope is the set of tenants a caller may read and act for. The zero Scope allows nothing.
type Scope struct {
	// All allows every tenant.
	All bool
	// Tenants lists the allowed tenants.
	Tenants []string
}

// Allows reports whether tenant is in scope.
func (s Scope) Allows(tenant string) bool { return s.All || slices.Contains(s.Tenants, tenant) }

// Item is one reconciliation item with the operation it concerns.
type Item struct {
	// ID is the item's public id: a random UUID (version 4), so ids shown in pages, links,
	// exports and audit targets say nothing about how many items exist or when one was opened.
	ID string
	// seq is the row's internal key; it never leaves the package.
	seq         int64
	OperationID string
	Tenant      string
	Workflow    string
	Reason      Reason
	Detail      string
	State       State
	Attempts    int
	// NextVerifyAt is the next automatic verification (nil when none is planned).
	NextVerifyAt *time.Time
	OpenedAt     time.Time
	ClosedAt     *time.Time
	// ClaimedBy is who holds the claim, "" when nobody does or the claim expired.
	ClaimedBy        string
	ClaimedAt        *time.Time
	ClaimExpiresAt   *time.Time
	Resolution       Outcome
	ResolutionReason string
	Note             string
	EvidenceURL      string
	ClosedBy         string
	// BatchID is the public id of the bulk action that resolved the item (nil when none did).
	BatchID   *string
	RetriedAt *time.Time
	RetriedBy string

	// The operation, for the queue's rows.
	ObjectRef      string
	IntendedEffect string
	Route          string
	IdempotencyKey string
	DomainOutcome  string
	TaskState      string
	// ToolError is true when the task completed with a tool error (isError) as its result.
	ToolError bool
	// FailureReason is why the work failed, in the words of whoever said so (the tool, the
	// server or the job API, named by FailureReasonBy); "" when it did not fail. See
	// operations.Operation.FailureReason.
	FailureReason, FailureReasonBy string
}

// Open reports whether the item still waits for a verifier or a person.
func (i Item) Open() bool { return i.ClosedAt == nil }

// ClaimedNow reports whether a claim is held at now.
func (i Item) ClaimedNow(now time.Time) bool {
	return i.ClaimedBy != "" && i.ClaimExpiresAt != nil && i.ClaimExpiresAt.After(now)
}

// CanRetry reports whether a retry is offered: the item was closed as not_applied (by a
// person or a verifier) and not retried yet.
func (i Item) CanRetry() bool {
	return i.ClosedAt != nil && i.Resolution == OutcomeNotApplied && i.RetriedAt == nil
}

// Verification is one verifier answer or a person's resolution: the evidence behind an outcome.
type Verification struct {
	ID int64
	// ItemID is the public id of the item it settled or re-verified, "" when none.
	ItemID     string
	Source     string
	Trigger    string
	Answer     Outcome
	Receipt    string
	Detail     string
	HTTPStatus *int
	Attempt    int
	At         time.Time
}

// Filter selects items for the queue and for bulk actions.
type Filter struct {
	// Tenant, Workflow and Reason match exactly when set.
	Tenant   string
	Workflow string
	Reason   Reason
	// State matches one state; "" means every open item, "closed" every closed one, "all" both.
	State string
	// OlderThan keeps items opened at least this long ago.
	OlderThan time.Duration
	// ClaimedBy keeps items whose live claim is held by this person; "nobody" keeps unclaimed ones.
	ClaimedBy string
	// After is the keyset cursor of a previous page.
	After string
	// Limit caps a page (default 50, at most 500).
	Limit int
}

// Page is one page of the queue.
type Page struct {
	Items []Item
	// Next is the cursor of the next page, "" on the last.
	Next string
	// Total is the number of items the filter selects over all pages.
	Total int
}

// Resolution is what a person resolves an item with.
type Resolution struct {
	// Outcome is applied, not_applied, compensated or duplicate.
	Outcome Outcome
	// Reason is one of the resolution reasons (built-in or configured).
	Reason string
	// Note is required: what the person found.
	Note string
	// EvidenceURL is required: an http(s) link to the evidence.
	EvidenceURL string
}
