package reconcile

import (
	"errors"

	"github.com/taskgate/taskgate/config"
)

// Verifications run beside the pass, never in it: a system of record that stops answering
// holds a few of them until their budget ends, not the pass that claims the others, and not
// the verifications of other systems of record.
const (
	// maxVerifications bounds the checks and item re-verifications in flight in one process;
	// a pass claims no more than there are free.
	maxVerifications = 16
	// maxVerificationsPerSystem bounds those of them asking one system of record at once. A
	// claimed check or item over that bound is handed back unasked and taken at a later pass.
	maxVerificationsPerSystem = 4
)

// errSystemBusy: the system of record has maxVerificationsPerSystem verifications in flight.
var errSystemBusy = errors.New("the system of record has its most verifications in flight")

// systemOf names the system of record a verification of workflow wf asks (its verifier's base
// URL, or the job API of the operation's job), "" when it asks none.
func systemOf(wf *config.Workflow, f facts) string {
	switch wf.Verifier.Kind {
	case KindHTTP:
		return "http " + wf.Verifier.BaseURL
	case KindJobAPI:
		return "job " + f.jobBase
	}
	return ""
}
