package reconcile_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
	"github.com/taskgate/taskgate/reconcile"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// extra adds workflows with verifiers: %[2]s is the receiver's base URL.
const extra = `
  - {name: refund-v, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: http, base_url: "%[2]s/records"},
     budgets: {status: {timeout: 2s, retries: 1}, result: {timeout: 5s, retries: 1}, create: {timeout: 3s}, reconcile: {timeout: 2s, retries: 1}}}
  - {name: refund-nv, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key}
  - {name: refund-404, server: rcv, tool: work_required, effect: effectful, task_use: required, fallback: {kind: reject},
     max_ttl: 30m, owners: [ops], idempotency_argument: idempotency_key, verifier: {kind: http, base_url: "%[2]s/nowhere"}}
  - {name: payout-v, server: rcv, tool: work_optional, effect: effectful, task_use: never, fallback: {kind: job_api, job_api: "%[2]s"},
     owners: [ops], verifier: {kind: job_api}}
`

var (
	all     = reconcile.Scope{All: true}
	acme    = reconcile.Scope{Tenants: []string{"acme"}}
	globex  = reconcile.Scope{Tenants: []string{"globex"}}
	support = audit.Actor{Name: "support@test", Kind: audit.KindAccount, Role: "support"}
	other   = audit.Actor{Name: "other@test", Kind: audit.KindAccount, Role: "support"}
)

type world struct {
	*opstest.Bundle
	rs *reconcile.Store
}

func setup(t *testing.T) *world {
	t.Helper()
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Extra: extra})
	return &world{Bundle: b, rs: reconcile.NewStore(b.Pool, reconcile.Options{ResolutionReasons: []string{"confirmed in the ledger export"}, Retrier: b.Ops})}
}

// verifier starts the re-verification service with fast backoff.
func (w *world) verifier(t *testing.T, maxAttempts int) <-chan int {
	t.Helper()
	passes := make(chan int, 1)
	svc, err := reconcile.New(reconcile.Config{Pool: w.Pool, Policy: w.Policy, Lookup: reconcile.Lookup{BuiltinURL: w.BaseURL},
		ReplicaID: "rv", Interval: 10 * time.Millisecond, Backoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
		MaxAttempts: maxAttempts, AfterPass: func(int) {
			select {
			case passes <- 1:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	return passes
}

func (w *world) item(t *testing.T, opID string) reconcile.Item {
	t.Helper()
	it, err := w.rs.ForOperation(context.Background(), all, opID)
	if err != nil {
		t.Fatalf("item of %s: %v", opID, err)
	}
	return it
}

func (w *world) hasItem(opID string) bool {
	_, err := w.rs.ForOperation(context.Background(), all, opID)
	return err == nil
}

func (w *world) auditCount(t *testing.T, action string) int {
	t.Helper()
	var n int
	if err := w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM audit_log WHERE action = $1`, action).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEachSourceOfUnknownOpensAnItem drives every source of an unknown outcome through the real
// start path, watchers and verifiers, and checks the item's reason and where it ends.
func TestEachSourceOfUnknownOpensAnItem(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		workflow  string
		args      string
		before    func(w *world)
		after     func(t *testing.T, w *world, id string)
		reason    reconcile.Reason
		wantState reconcile.State
	}{
		{name: "create unacknowledged, settled by the verifier", workflow: "refund-v", args: `{"duration_ms": 50}`,
			before: func(w *world) {
				w.Receiver.Knobs().SetTool("work_required", receiver.Fault{DropBeforeCreateResult: true})
			},
			reason: reconcile.ReasonCreateUnacknowledged, wantState: reconcile.StateSettled},
		{name: "sync timeout, no verifier: a person", workflow: "lookup", args: `{"duration_ms": 3000}`,
			reason: reconcile.ReasonSyncTimeout, wantState: reconcile.StateNeedsPerson},
		{name: "task failed, effect unverified", workflow: "refund-nv", args: `{"outcome": "rpc_error"}`,
			reason: reconcile.ReasonTaskFailedUnverified, wantState: reconcile.StateNeedsPerson},
		{name: "task cancelled, effect unverified", workflow: "refund-nv", args: `{"outcome": "hang"}`,
			after: func(t *testing.T, w *world, id string) {
				if _, err := w.Pool.Exec(context.Background(), `UPDATE tasks SET state = 'cancelled', result_state = 'fetched', terminal_at = now() WHERE operation_id = $1`, id); err != nil {
					t.Fatal(err)
				}
			},
			reason: reconcile.ReasonTaskCancelledUnverified, wantState: reconcile.StateNeedsPerson},
		{name: "task expired", workflow: "refund-nv", args: `{"outcome": "hang"}`,
			after: func(t *testing.T, w *world, id string) {
				if err := w.Store.MarkUnknown(context.Background(), id, operations.StateExpired, operations.ReasonTaskExpired, "deadline passed"); err != nil {
					t.Fatal(err)
				}
			},
			reason: reconcile.ReasonTaskExpired, wantState: reconcile.StateNeedsPerson},
		{name: "verifier answers unknown, backoff then a person", workflow: "refund-404", args: `{"duration_ms": 10}`,
			reason: reconcile.ReasonVerifierUnknown, wantState: reconcile.StateNeedsPerson},
		{name: "task failed but the effect applied", workflow: "refund-v", args: `{"outcome": "rpc_error", "effect_at": "start"}`,
			reason: reconcile.ReasonTaskDomainMismatch, wantState: reconcile.StateNeedsPerson},
		{name: "human handoff", workflow: "kyc", args: `{}`,
			reason: reconcile.ReasonHumanHandoff, wantState: reconcile.StateNeedsPerson},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := setup(t)
			if c.before != nil {
				c.before(w)
			}
			id := w.Start(t, c.workflow, "k-"+c.workflow, c.args).Response.OperationID
			w.Receiver.Knobs().SetTool("work_required", receiver.Fault{})
			_, wp := w.Watcher(t, "w1", nil)
			if c.after != nil {
				opstest.WaitFor(t, wp, 10*time.Second, "task created", func() bool { return w.Detail(t, id).Task == nil || w.Detail(t, id).Task.TaskID != "" || w.hasItem(id) })
				c.after(t, w, id)
			}
			vp := w.verifier(t, 3)
			opstest.WaitFor(t, vp, 20*time.Second, "item "+string(c.wantState), func() bool {
				if !w.hasItem(id) {
					return false
				}
				it := w.item(t, id)
				return it.Reason == c.reason && it.State == c.wantState
			})
			it := w.item(t, id)
			if it.Tenant != "acme" || it.Workflow != c.workflow {
				t.Fatalf("item %+v", it)
			}
			vs, err := w.rs.Verifications(context.Background(), all, id)
			if err != nil {
				t.Fatal(err)
			}
			switch c.wantState {
			case reconcile.StateSettled:
				d := w.Detail(t, id)
				if d.DomainOutcome != operations.OutcomeApplied || len(vs) == 0 || vs[len(vs)-1].Receipt == "" {
					t.Fatalf("settled: outcome %s, verifications %+v", d.DomainOutcome, vs)
				}
				if w.auditCount(t, "reconcile.settle") != 1 {
					t.Fatal("no audit row for the settlement")
				}
			case reconcile.StateNeedsPerson:
				if c.reason == reconcile.ReasonVerifierUnknown && (it.Attempts < 3 || len(vs) < 3) {
					t.Fatalf("asked a person after %d attempts, %d verifications", it.Attempts, len(vs))
				}
				if c.reason == reconcile.ReasonTaskDomainMismatch && w.Detail(t, id).DomainOutcome != operations.OutcomeApplied {
					t.Fatalf("mismatch: outcome %s, want the verified applied", w.Detail(t, id).DomainOutcome)
				}
			}
			if w.auditCount(t, "reconcile.open") < 1 {
				t.Fatal("no audit row for the opening")
			}
		})
	}
}

// handoff opens a human-handoff item (needs a person at once) for tenant.
func (w *world) handoff(t *testing.T, tenant, key string) reconcile.Item {
	t.Helper()
	res, err := w.Ops.Start(context.Background(), operations.Scope{All: true}, operations.StartRequest{IdempotencyKey: key, Workflow: "kyc",
		Tenant: tenant, Actor: "app", ObjectRef: "customer C-7"})
	if err != nil {
		t.Fatal(err)
	}
	return w.item(t, res.Response.OperationID)
}

func TestClaimRaceExactlyOneWins(t *testing.T) {
	t.Parallel()
	w := setup(t)
	it := w.handoff(t, "acme", "race")
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, refused := 0, 0
	start := make(chan struct{})
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			who := audit.Actor{Name: "claimer-" + string(rune('A'+i%26)) + string(rune('a'+i/26)), Kind: audit.KindAccount, Role: "support"}
			_, err := w.rs.Claim(context.Background(), who, all, it.ID, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, reconcile.ErrClaimed):
				refused++
			default:
				t.Errorf("claim: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins != 1 || refused != 49 {
		t.Fatalf("wins %d refused %d, want 1 and 49", wins, refused)
	}
	if n := w.auditCount(t, "reconcile.claim"); n != 1 {
		t.Fatalf("claim audit rows = %d, want 1", n)
	}
	got := w.item(t, it.OperationID)
	if got.ClaimedBy == "" || got.ClaimExpiresAt == nil {
		t.Fatalf("claim not visible: %+v", got)
	}
}

func TestClaimResolveRulesAndTenantScope(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := context.Background()
	it := w.handoff(t, "globex", "scope")
	res := reconcile.Resolution{Outcome: reconcile.OutcomeApplied, Reason: "confirmed in the ledger export", Note: "seen in export 12",
		EvidenceURL: "https://ledger.example/export/12"}

	// Another tenant's item does not exist for acme: read, claim, resolve, retry all refused.
	if _, err := w.rs.Get(ctx, acme, it.ID); !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("cross-tenant get: %v", err)
	}
	if _, err := w.rs.Claim(ctx, support, acme, it.ID, 0); !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("cross-tenant claim: %v", err)
	}
	if _, err := w.rs.Resolve(ctx, support, acme, it.ID, res); !errors.Is(err, reconcile.ErrNotFound) {
		t.Fatalf("cross-tenant resolve: %v", err)
	}
	if p, err := w.rs.List(ctx, acme, reconcile.Filter{}); err != nil || len(p.Items) != 0 {
		t.Fatalf("acme list = %+v, %v", p.Items, err)
	}
	// Resolving needs one's own claim; a competing claim is refused, not overwritten.
	if _, err := w.rs.Resolve(ctx, support, globex, it.ID, res); !errors.Is(err, reconcile.ErrNotClaimed) {
		t.Fatalf("unclaimed resolve: %v", err)
	}
	if _, err := w.rs.Claim(ctx, other, globex, it.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.Claim(ctx, support, globex, it.ID, 0); !errors.Is(err, reconcile.ErrClaimed) {
		t.Fatalf("competing claim: %v", err)
	}
	if got := w.item(t, it.OperationID); got.ClaimedBy != other.Name {
		t.Fatalf("claim overwritten: %s", got.ClaimedBy)
	}
	if p, _ := w.rs.List(ctx, globex, reconcile.Filter{ClaimedBy: other.Name}); len(p.Items) != 1 || p.Items[0].ClaimedBy != other.Name {
		t.Fatalf("claimed-by filter: %+v", p.Items)
	}
	if _, err := w.rs.Release(ctx, other, globex, it.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.Claim(ctx, support, globex, it.ID, 0); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]reconcile.Resolution{
		"no note":     {Outcome: res.Outcome, Reason: res.Reason, EvidenceURL: res.EvidenceURL},
		"no evidence": {Outcome: res.Outcome, Reason: res.Reason, Note: "x"},
		"bad outcome": {Outcome: "maybe", Reason: res.Reason, Note: "x", EvidenceURL: res.EvidenceURL},
		"bad reason":  {Outcome: res.Outcome, Reason: "because", Note: "x", EvidenceURL: res.EvidenceURL},
		"long note":   {Outcome: res.Outcome, Reason: res.Reason, Note: strings.Repeat("x", reconcile.MaxNote+1), EvidenceURL: res.EvidenceURL},
	} {
		if _, err := w.rs.Resolve(ctx, support, globex, it.ID, bad); !errors.Is(err, reconcile.ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	done, err := w.rs.Resolve(ctx, support, globex, it.ID, res)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != reconcile.StateResolved || done.Open() || w.Detail(t, it.OperationID).DomainOutcome != operations.OutcomeApplied {
		t.Fatalf("resolved %+v", done)
	}
	if _, err := w.rs.Retry(ctx, support, globex, it.ID); !errors.Is(err, reconcile.ErrRetryNotAllowed) {
		t.Fatalf("retry after applied: %v", err)
	}
	for _, a := range []string{"reconcile.open", "reconcile.claim", "reconcile.release", "reconcile.resolve"} {
		if w.auditCount(t, a) == 0 {
			t.Errorf("no audit row %s", a)
		}
	}
}

// TestRetryAfterNotAppliedMakesNoSecondEffect: the creation's answer is lost but the task runs
// and applies; a person (wrongly) resolves not_applied and retries. The retry reuses the key,
// and the system of record still shows one effect.
func TestRetryAfterNotAppliedMakesNoSecondEffect(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := context.Background()
	w.Receiver.Knobs().SetTool("work_required", receiver.Fault{DropBeforeCreateResult: true})
	id := w.Start(t, "refund-nv", "k-retry", `{"duration_ms": 20}`).Response.OperationID
	w.Receiver.Knobs().SetTool("work_required", receiver.Fault{})
	it := w.item(t, id)
	if it.Reason != reconcile.ReasonCreateUnacknowledged {
		t.Fatalf("reason %s", it.Reason)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if rec, ok := w.Receiver.Records().Get(id); ok && rec.Status == receiver.RecordApplied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first call never applied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := w.rs.Claim(ctx, support, all, it.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.Resolve(ctx, support, all, it.ID, reconcile.Resolution{Outcome: reconcile.OutcomeNotApplied,
		Reason: "confirmed by the owning team", Note: "team says nothing happened", EvidenceURL: "https://tickets.example/T-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.Retry(ctx, support, all, it.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.rs.Retry(ctx, support, all, it.ID); !errors.Is(err, reconcile.ErrRetryNotAllowed) {
		t.Fatalf("second retry: %v", err)
	}
	_, wp := w.Watcher(t, "w1", nil)
	opstest.WaitFor(t, wp, 10*time.Second, "retried task ends", func() bool { return w.Detail(t, id).Envelope != nil })
	c := w.Receiver.Counters()
	if c.ToolCallsByKey[id] != 2 || c.Effects != 1 || c.EffectsRefused < 1 {
		t.Fatalf("calls by key %d, effects %d, refused %d: want 2 calls and one effect", c.ToolCallsByKey[id], c.Effects, c.EffectsRefused)
	}
	if w.auditCount(t, "reconcile.retry") != 1 {
		t.Fatal("no audit row for the retry")
	}
}

func TestBulkNeedsTypedConfirmationAndSkipsOthersClaims(t *testing.T) {
	t.Parallel()
	w := setup(t)
	ctx := context.Background()
	var items []reconcile.Item
	for _, k := range []string{"b1", "b2", "b3"} {
		items = append(items, w.handoff(t, "acme", k))
	}
	w.handoff(t, "globex", "b4")
	if _, err := w.rs.Claim(ctx, other, all, items[0].ID, 0); err != nil {
		t.Fatal(err)
	}
	f := reconcile.Filter{Workflow: "kyc"}
	n, err := w.rs.Preview(ctx, acme, f)
	if err != nil || n != 3 {
		t.Fatalf("preview %d %v, want 3 in acme's scope", n, err)
	}
	res := reconcile.Resolution{Outcome: reconcile.OutcomeCompensated, Reason: "compensating action taken", Note: "reverted", EvidenceURL: "https://x.example/1"}
	if _, err := w.rs.Bulk(ctx, support, acme, reconcile.BulkRequest{Filter: f, Action: reconcile.BulkResolve, Confirm: "yes", Resolution: res}); !errors.Is(err, reconcile.ErrConfirmation) {
		t.Fatalf("wrong confirmation: %v", err)
	}
	out, err := w.rs.Bulk(ctx, support, acme, reconcile.BulkRequest{Filter: f, Action: reconcile.BulkResolve,
		Confirm: reconcile.ConfirmPhrase(reconcile.BulkResolve, n), Resolution: res})
	if err != nil {
		t.Fatal(err)
	}
	if out.Matched != 3 || out.Applied != 2 || len(out.Skipped) != 1 || out.Skipped[items[0].ID] == "" {
		t.Fatalf("batch %+v", out)
	}
	if got := w.item(t, items[0].OperationID); got.ClaimedBy != other.Name || !got.Open() {
		t.Fatalf("someone else's claim was touched: %+v", got)
	}
	if w.auditCount(t, "reconcile.batch") != 1 || w.auditCount(t, "reconcile.resolve") != 2 {
		t.Fatal("batch not audited item by item")
	}
}

func TestResolutionReasonsExtendFromConfig(t *testing.T) {
	t.Parallel()
	got := reconcile.ResolutionReasons([]string{"confirmed with the customer", "verified in the system of record"})
	if len(got) != len(reconcile.BuiltinResolutionReasons)+1 || got[len(got)-1] != "confirmed with the customer" {
		t.Fatalf("reasons %v", got)
	}
}
