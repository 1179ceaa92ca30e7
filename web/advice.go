package web

import (
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// reasonAdvice says, for each reconciliation reason code, what the person on call is meant to
// do. ReasonText says what happened; this says the next step.
var reasonAdvice = map[string]string{
	reconcile.ReasonCreateUnacknowledged:    "Look in the system of record for the business key: if the effect is there, resolve as applied; if not, resolve as not applied and retry. Taskgate never resends the call by itself.",
	reconcile.ReasonSyncTimeout:             "The server may still have done the work. Check the system of record for the business key, then resolve with what it shows.",
	reconcile.ReasonSyncTransportLost:       "The connection dropped mid-call. Check the system of record for the business key, then resolve with what it shows.",
	reconcile.ReasonJobUnacknowledged:       "Look up the job in the job system by the idempotency key: resolve as applied if it ran, not applied if it does not exist.",
	reconcile.ReasonTaskUnobservable:        "Check the server's health on the Servers page; then confirm in the system of record whether the effect happened and resolve.",
	reconcile.ReasonTaskExpired:             "The server dropped the task before it ended. Confirm in the system of record whether the effect happened and resolve.",
	reconcile.ReasonSessionGone:             "The server restarted or lost its session. Confirm in the system of record whether the effect happened and resolve.",
	reconcile.ReasonResultUnavailable:       "The task ended but its result could not be read. Confirm the effect in the system of record and resolve.",
	reconcile.ReasonTaskFailedUnverified:    "A failed task can still have applied part of its effect. Check the system of record and resolve; retry only if nothing applied.",
	reconcile.ReasonTaskCancelledUnverified: "A cancel may have come too late. Check the system of record for a late effect and resolve; compensate if it applied.",
	reconcile.ReasonVerifierUnknown:         "The verifier could not tell. Re-verify later, or check the system of record by hand and resolve.",
	reconcile.ReasonTaskDomainMismatch:      "The server's answer and the system of record disagree. Trust the system of record: resolve with what it shows and tell the server's owners.",
	reconcile.ReasonHumanHandoff:            "The workflow sends this work to a person. Do it by hand in the system of record, then resolve with a link to the evidence.",
	reconcile.ReasonManualVerification:      "This workflow has no verifier. Check the system of record for the business key and resolve with what it shows.",
	reconcile.ReasonCallUnrecorded:          "The call went out but its answer was lost. Check the system of record for the business key and resolve; never retry before that.",
	reconcile.ReasonServerTextReplaced:      "The kept answer is not verbatim. Compare it with the server's own logs if the exact text matters, then resolve.",
}

// adviceFor is what to do about an item or an operation that needs a person, "" when nothing.
func adviceFor(reason, attention string) string {
	if a, ok := reasonAdvice[reason]; ok {
		return a
	}
	switch attention {
	case operations.AttentionHandoff:
		return reasonAdvice[reconcile.ReasonHumanHandoff]
	case operations.AttentionReconcile:
		return "Open the reconciliation item, check the system of record for the business key and resolve with what it shows."
	}
	return ""
}

// itemOpView is the part of an operation's view that its timeline needs.
func itemOpView(d *operations.Detail) OperationView {
	v := OperationView{D: *d}
	v.Timeline, v.LastProgress, v.LastProgressAt = timelineLines(*d)
	return v
}
