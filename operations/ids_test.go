package operations_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/taskgate/taskgate/internal/opstest"
)

// Operation ids are version 7 UUIDs, in the order the operations were created, whichever way
// the start went (a call sent, or a handoff written in one transaction): tables keyed by
// operation take new rows at the end of their indexes.
func TestOperationIDsAreTimeOrderedUUIDs(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{})
	var ids []string
	for i, wf := range []string{"refund", "kyc", "refund", "kyc"} {
		res := b.Start(t, wf, "ordered-"+string(rune('a'+i)), `{"duration_ms": 60000}`)
		ids = append(ids, res.Response.OperationID)
	}
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil || u.Version() != 7 {
			t.Fatalf("operation id %s: version %d, %v", id, u.Version(), err)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("operation %d's id %s does not sort after the one before, %s", i, id, ids[i-1])
		}
	}
}
