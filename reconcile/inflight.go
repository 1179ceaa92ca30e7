package reconcile

import (
	"errors"
	"sync"

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

// verifications counts this process's verifications claimed or in flight.
type verifications struct {
	mu     sync.Mutex
	total  int            // reserved, claimed or in flight
	asking map[string]int // asking, by system of record
}

// reserve takes up to n verifications for a claim and returns how many it took.
func (v *verifications) reserve(n int) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := max(0, min(n, maxVerifications-v.total))
	v.total += k
	return k
}

// release gives back n reserved verifications that were not claimed or have ended.
func (v *verifications) release(n int) {
	v.mu.Lock()
	v.total -= n
	v.mu.Unlock()
}

// ask starts asking system (the empty system, no verifier, always may); false when it has
// maxVerificationsPerSystem in flight. A true answer is ended with asked.
func (v *verifications) ask(system string) bool {
	if system == "" {
		return true
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.asking[system] >= maxVerificationsPerSystem {
		return false
	}
	if v.asking == nil {
		v.asking = map[string]int{}
	}
	v.asking[system]++
	return true
}

func (v *verifications) asked(system string) {
	if system == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.asking[system]--; v.asking[system] <= 0 {
		delete(v.asking, system)
	}
}

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
