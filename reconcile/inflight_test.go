package reconcile_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// silentRecords is a system of record on 127.0.0.1 that takes lookups and never answers them
// (until the test ends or the verifier gives up); it counts them by operation.
type silentRecords struct {
	mu       sync.Mutex
	byOp     map[string]int
	inFlight int
	most     int
}

func (s *silentRecords) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.byOp[r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]]++
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	<-r.Context().Done()
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
}

func (s *silentRecords) counts() (lookups map[string]int, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lookups = map[string]int{}
	for k, v := range s.byOp {
		lookups[k] = v
	}
	return lookups, s.most
}

// A system of record that stops answering holds neither the verifier's pass nor the
// verifications of other systems of record: it is asked at most 4 at once, each ask ends at
// the workflow's reconciliation budget, and an item claimed while its system is busy is handed
// back without spending one of its attempts, so a person is asked only after the attempts
// were really made.
func TestASilentSystemOfRecordHoldsNoOtherVerification(t *testing.T) {
	t.Parallel()
	silent := &silentRecords{byOp: map[string]int{}}
	srv := httptest.NewServer(silent)
	t.Cleanup(srv.Close)
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Extra: extra + fmt.Sprintf(`
  - {name: charge-silent, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: sync, max_duration: 2s},
     owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: http, base_url: "%s"}, budgets: {reconcile: {timeout: 1s, retries: 0}}}
  - {name: charge-v, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: sync, max_duration: 2s},
     owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: http, base_url: "%%[2]s/records"}}
`, srv.URL)})
	w := &world{Bundle: b, rs: reconcile.NewStore(b.Pool, reconcile.Options{Retrier: b.Ops})}
	var silentOps []string
	for i := range 8 {
		silentOps = append(silentOps, w.Start(t, "charge-silent", fmt.Sprintf("s-%d", i), `{}`).Response.OperationID)
	}
	const maxAttempts = 2
	passes := w.verifier(t, maxAttempts)
	opstest.WaitFor(t, passes, 10*time.Second, "the silent system of record holding a lookup", func() bool {
		lookups, _ := silent.counts()
		return len(lookups) > 0
	})
	quick := w.Start(t, "charge-v", "q-1", `{}`).Response.OperationID
	opstest.WaitFor(t, passes, 5*time.Second, "the other system of record's answer", func() bool {
		return w.Detail(t, quick).DomainOutcome == operations.OutcomeApplied
	})
	escalated := 0
	opstest.WaitFor(t, passes, 30*time.Second, "a silent operation's item given to a person", func() bool {
		escalated = 0
		for _, id := range silentOps {
			if w.hasItem(id) && w.item(t, id).State == reconcile.StateNeedsPerson {
				escalated++
			}
		}
		return escalated > 0
	})
	lookups, most := silent.counts()
	if most > 4 {
		t.Errorf("the silent system of record was asked %d times at once, want at most 4", most)
	}
	if most < 4 {
		t.Errorf("the silent system of record was asked at most %d times at once with 8 operations to verify, want 4", most)
	}
	for _, id := range silentOps {
		if !w.hasItem(id) {
			continue
		}
		if it := w.item(t, id); it.State == reconcile.StateNeedsPerson && lookups[id] < 1+maxAttempts {
			t.Errorf("operation %s went to a person after %d lookups (its check and %d attempts), want its check and %d attempts made",
				id, lookups[id], it.Attempts, maxAttempts)
		}
	}
}
