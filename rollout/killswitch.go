package rollout

import "context"

// StartCheck names a new Task start for the kill switch.
type StartCheck struct {
	Workflow, Server, Tenant string
}

// KillVerdict is the kill switch's answer for a new Task start.
type KillVerdict struct {
	// Blocked is true when new Task starts are refused.
	Blocked bool
	// Switch names the engaged switch ("kill-switch:workflow:refund"), "" when none is.
	Switch string
	// FailedSafe is true when the switch could not be read and the start is blocked because
	// of it; Why says what went wrong.
	FailedSafe bool
	Why        string
}

// KillSwitch says whether a new Task start is blocked. It must answer from memory (no database
// round trip on the start path) and fail safe: when it cannot tell, the start is blocked with
// FailedSafe set. The killswitch package's Service implements it.
type KillSwitch interface {
	Check(ctx context.Context, s StartCheck) KillVerdict
}
