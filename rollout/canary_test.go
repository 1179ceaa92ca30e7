package rollout_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"testing"
	"time"

	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/rollout"
)

// murmur3x86 is MurmurHash3's x86 32-bit variant with seed 0, written out from the algorithm's
// definition (block mix with c1 0xcc9e2d51 and c2 0x1b873593, tail, length and fmix32), so the
// bucket below is checked against the hash flagd's fractional is defined on, not against the
// library the product uses.
func murmur3x86(data []byte) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	var h uint32
	n := len(data) / 4
	for i := range n {
		k := binary.LittleEndian.Uint32(data[4*i:])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	tail := data[4*n:]
	var k uint32
	switch len(tail) {
	case 3:
		k ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		k ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		k ^= uint32(tail[0])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(len(data)) //nolint:gosec // test keys are short
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// TestBucketIsFlagdFractional checks the canary bucket against flagd's fractional operation:
// variants published in flagd's own evaluator tests for known keys (four variants of weight
// 25, and two of 50, bucketed by flag key followed by the key), and, for many tenants, the
// bucket flagd's documented formula gives (MurmurHash3 x86 32-bit of flagKey+targetingKey,
// times the total weight, shifted right by 32).
func TestBucketIsFlagdFractional(t *testing.T) {
	t.Parallel()
	// [lo, hi) is the range of buckets of the variant flagd chose.
	quarter := map[string][2]int{"red": {0, 25}, "blue": {25, 50}, "green": {50, 75}, "yellow": {75, 100}}
	for _, c := range []struct{ flag, key, variant string }{
		{"headerColor", "rachel@faas.com", "blue"},
		{"headerColor", "monica@faas.com", "yellow"},
		{"headerColor", "joey@faas.com", "red"},
		{"headerColor", "ross@faas.com", "blue"},
		{"my-seed", "rachel@faas.com", "green"},
		{"my-seed", "monica@faas.com", "red"},
		{"my-seed", "joey@faas.com", "blue"},
		{"my-seed", "ross@faas.com", "green"},
	} {
		b, r := rollout.BucketOf(c.flag, c.key), quarter[c.variant]
		if b < r[0] || b >= r[1] {
			t.Errorf("%s+%s: bucket %d, but flagd chooses %s ([%d, %d))", c.flag, c.key, b, c.variant, r[0], r[1])
		}
	}
	// [["blue", 50], ["green", 50]] by targeting key: flagd chooses green for foo@foo.com.
	if b := rollout.BucketOf("headerColor", "foo@foo.com"); b < 50 {
		t.Errorf("headerColor+foo@foo.com: bucket %d, flagd chooses the second half", b)
	}
	for i := range 5000 {
		tenant := fmt.Sprintf("tenant-%d", i)
		key := rollout.CanaryFlagKey("refund") + tenant
		want := int((uint64(murmur3x86([]byte(key))) * 100) >> 32)
		if got := rollout.Bucket("refund", tenant); got != want {
			t.Fatalf("%s: bucket %d, flagd's formula gives %d", tenant, got, want)
		}
	}
}

// TestCanaryFlagSameOnEveryReplica promotes into the canary: the move writes the workflow's
// canary flag (fractional over the tenant), two replicas' routers put the same tenants on the
// Task route, exactly those whose flagd bucket is below the step, and an operator's edit of the
// flag moves tenants because the flag decides.
func TestCanaryFlagSameOnEveryReplica(t *testing.T) {
	t.Parallel()
	c := setupController(t, "")
	c.passGates(t)
	for range 3 { // shadow, canary 5 %, canary 50 %
		if _, err := c.ctl.Promote(c.ctx, ops, "refund", "up"); err != nil {
			t.Fatal(err)
		}
	}
	other, err := killswitch.Open(c.ctx, c.ctl.Pool(), killswitch.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	var routers []*rollout.Router
	for _, k := range []*killswitch.Service{c.kill, other} {
		r, err := rollout.NewRouter(rollout.RouterConfig{Policy: c.policy, Manifests: c.mstore, Stages: c.ctl.Stages(), KillSwitch: k, Canary: k})
		if err != nil {
			t.Fatal(err)
		}
		routers = append(routers, r)
	}
	waitFlag := func(k *killswitch.Service, pct int) {
		t.Helper()
		want := fmt.Sprintf(`{"fractional":[["task",%d],["incumbent",%d]]}`, pct, 100-pct)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if f, ok := k.Snapshot().Definition(rollout.CanaryFlagKey("refund")); ok && compact(f.Targeting) == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica never saw the canary flag at %d%%", pct)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Each replica's flags follow the promotion through the database's notification.
	waitFlag(c.kill, 50)
	waitFlag(other, 50)
	inside := 0
	for i := range 300 {
		tenant := fmt.Sprintf("t%d", i)
		want := rollout.Bucket("refund", tenant) < 50
		for n, r := range routers {
			got, err := r.Route(c.ctx, "refund", tenant)
			if err != nil {
				t.Fatal(err)
			}
			if (got.Decision.Route == rollout.RouteTask) != want || got.Input.CanaryFlag != rollout.CanaryFlagKey("refund") {
				t.Fatalf("replica %d, %s (bucket %d): %s/%s via flag %q", n, tenant, got.Input.Bucket, got.Decision.Route, got.Decision.Reason, got.Input.CanaryFlag)
			}
		}
		if want {
			inside++
			got, _ := routers[0].Route(c.ctx, "refund", tenant)
			words := fmt.Sprintf("canary step 2 of 2 (50%%) · flag rollout-canary.refund: task · bucket %d", got.Input.Bucket)
			if w := got.Context().Words(); w != words {
				t.Fatalf("route context %q, want %q", w, words)
			}
		}
	}
	if inside < 110 || inside > 190 {
		t.Fatalf("%d of 300 tenants inside a 50%% canary", inside)
	}
	// The flag, not the stored percent, decides: edited to 0 %, nobody is inside.
	if err := c.kill.Store().PutFlag(c.ctx, ops, rollout.CanaryFlagKey("refund"), killswitch.CanaryFlag("refund", 0), "hold everyone back"); err != nil {
		t.Fatal(err)
	}
	waitFlag(other, 0)
	waitFlag(c.kill, 0)
	for i := range 50 {
		got, err := routers[1].Route(c.ctx, "refund", fmt.Sprintf("t%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if got.Decision.Reason != rollout.ReasonCanaryOut || got.Input.CanaryVariant != rollout.CanaryIncumbent {
			t.Fatalf("t%d with the flag at 0%%: %s (%s)", i, got.Decision.Reason, got.Input.CanaryVariant)
		}
	}
	// Rollback sets the flag to 0 % too.
	if _, err := c.ctl.Rollback(c.ctx, ops, "refund", "back"); err != nil {
		t.Fatal(err)
	}
	if h, err := c.kill.Store().History(c.ctx, rollout.CanaryFlagKey("refund"), 10); err != nil || len(h) < 4 {
		t.Fatalf("canary flag history: %d changes, %v", len(h), err)
	}
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}
