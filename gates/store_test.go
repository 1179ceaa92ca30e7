package gates_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/receiver"
)

func fakeRun(workflow string, ttl string, verdict gates.Verdict, hard ...string) *gates.Run {
	dev := gates.Deviations{gates.DevRequestedTTL: {Observed: ttl, Matches: "2025-11-25"}, gates.DevPollInterval: {Observed: "present"}}
	r := &gates.Run{Binding: gates.Binding{Workflow: workflow, Server: "rcv", ManifestFingerprint: "mf-1", Build: "b1",
		Pins: map[string]string{"server_version": "1.0.0"}}, StartedBy: "alice", Era: "2025-11-25",
		Started: time.Now().UTC(), Finished: time.Now().UTC(), Deviations: dev, Verdict: verdict, HardFailures: hard}
	r.DeviationFingerprint = dev.Fingerprint()
	r.Cases = []gates.Case{{Suite: gates.SuiteContract, Name: "create-get-result", Verdict: verdict, Reason: "created\u202e and observed",
		Started: time.Now().UTC(), Duration: 42 * time.Millisecond, Evidence: gates.Evidence{
			Messages: []faultproxy.Message{{Dir: "request", Method: "tools/call"}}, Timings: map[string]int64{"create": 3}}}}
	return r
}

func TestSavedRunKeepsCasesEvidenceAndBinding(t *testing.T) {
	t.Parallel()
	st := gates.NewStore(pgtest.New(t))
	ctx := context.Background()
	id, diff, err := st.Save(ctx, fakeRun("refund", "honoured", gates.Pass))
	if err != nil || len(diff) != 0 {
		t.Fatalf("save: %v, diff %v", err, diff)
	}
	got, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Workflow != "refund" || got.Pins["server_version"] != "1.0.0" || got.Verdict != gates.Pass || got.Passed != 1 ||
		len(got.Cases) != 1 || got.Cases[0].Evidence.Messages[0].Method != "tools/call" || got.Cases[0].Duration != 42*time.Millisecond ||
		got.Deviations[gates.DevRequestedTTL].Observed != "honoured" {
		t.Fatalf("stored run %+v", got)
	}
	if _, err := st.Get(ctx, id+100); !errors.Is(err, gates.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
	list, err := st.List(ctx, gates.Filter{Workflow: "refund"})
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("list %+v %v", list, err)
	}
}

func TestADeviationChangeIsDiffedAndVoidsEarlierVerdicts(t *testing.T) {
	t.Parallel()
	st := gates.NewStore(pgtest.New(t))
	ctx := context.Background()
	first, _, err := st.Save(ctx, fakeRun("refund", "honoured", gates.Pass))
	if err != nil {
		t.Fatal(err)
	}
	b := gates.Binding{Workflow: "refund", ManifestFingerprint: "mf-1", Build: "b1", Pins: map[string]string{"server_version": "1.0.0"}}
	if s, _ := st.Latest(ctx, b); !s.Passing || s.State != gates.EvidenceCurrent {
		t.Fatalf("before the change: %+v", s)
	}
	second, diff, err := st.Save(ctx, fakeRun("refund", "ignored (unlimited)", gates.Pass))
	if err != nil {
		t.Fatal(err)
	}
	if len(diff) != 1 || diff[0].Behaviour != gates.DevRequestedTTL || diff[0].Before != "honoured" || diff[0].After != "ignored (unlimited)" {
		t.Fatalf("diff %+v", diff)
	}
	var live, voided int
	pool := st.Pool()
	_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE voided_at IS NULL), count(*) FILTER (WHERE voided_at IS NOT NULL) FROM gate_verdicts WHERE workflow = 'refund'`).Scan(&live, &voided)
	if live != 1 || voided != 1 {
		t.Fatalf("rollout verdicts: %d live, %d voided; want the new run's suite live and the old one voided", live, voided)
	}
	old, _ := st.Get(ctx, first)
	if old.VoidedAt == nil || !strings.Contains(old.VoidedReason, "requested_ttl") {
		t.Fatalf("the earlier run was not voided: %+v", old.Summary)
	}
	newer, _ := st.Get(ctx, second)
	if newer.VoidedAt != nil || len(newer.DeviationDiff) != 1 {
		t.Fatalf("the new run %+v", newer.Summary)
	}
}

func TestLatestSaysWhyEvidenceIsMissingStaleOrFailing(t *testing.T) {
	t.Parallel()
	st := gates.NewStore(pgtest.New(t))
	ctx := context.Background()
	b := gates.Binding{Workflow: "refund", ManifestFingerprint: "mf-1", Build: "b1", Pins: map[string]string{"server_version": "1.0.0"}}
	s, err := st.Latest(ctx, b)
	if err != nil || s.State != gates.EvidenceMissing || s.Passing {
		t.Fatalf("missing: %+v %v", s, err)
	}
	if _, _, err := st.Save(ctx, fakeRun("refund", "honoured", gates.Pass)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*gates.Binding)
		reason string
	}{
		{"manifest", func(b *gates.Binding) { b.ManifestFingerprint = "mf-2" }, "manifest fingerprint"},
		{"build", func(b *gates.Binding) { b.Build = "b2" }, "build b2"},
		{"pins", func(b *gates.Binding) { b.Pins = map[string]string{"server_version": "1.1.0"} }, "pins changed"},
		{"deviation", func(b *gates.Binding) { b.DeviationFingerprint = "dev:other" }, "deviation fingerprint"},
	} {
		bb := b
		tc.change(&bb)
		s, err := st.Latest(ctx, bb)
		if err != nil || s.State != gates.EvidenceStale || s.Passing || len(s.Reasons) == 0 || !strings.Contains(s.Reasons[0], tc.reason) {
			t.Errorf("%s: %+v %v", tc.name, s, err)
		}
	}
	if _, _, err := st.Save(ctx, fakeRun("refund", "honoured", gates.Fail, gates.HardCrossIdentity)); err != nil {
		t.Fatal(err)
	}
	s, _ = st.Latest(ctx, b)
	if s.State != gates.EvidenceCurrent || s.Passing || !strings.Contains(strings.Join(s.Reasons, " "), gates.HardCrossIdentity) {
		t.Fatalf("hard failure: %+v", s)
	}
}

func TestAChangeQueuesOneRepeatRunThatOneReplicaRuns(t *testing.T) {
	t.Parallel()
	st := gates.NewStore(pgtest.New(t))
	ctx := context.Background()
	rcv, url := startReceiver(t, receiver.ErasExtension)
	if _, _, err := st.Save(ctx, fakeRun("refund", "honoured", gates.Pass)); err != nil {
		t.Fatal(err)
	}
	b := gates.Binding{Workflow: "refund", Server: "rcv", ManifestFingerprint: "mf-2", Build: "b1", Pins: map[string]string{"server_version": "1.0.0"}}
	s, queued, err := st.Recheck(ctx, b)
	if err != nil || !queued || s.State != gates.EvidenceStale {
		t.Fatalf("recheck: %+v queued %v %v", s, queued, err)
	}
	if _, again, _ := st.Recheck(ctx, b); again {
		t.Fatal("a second recheck queued a second run")
	}
	// Lease: a claim is exclusive until it expires.
	item, err := st.Claim(ctx, "probe", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, "other", time.Minute); !errors.Is(err, gates.ErrNotFound) {
		t.Fatalf("a held lease was claimed again: %v", err)
	}
	time.Sleep(80 * time.Millisecond) // let the probe's short lease expire
	var runs atomic.Int64
	stored := make(chan int64, 4)
	target := func(workflow, server string) (gates.Target, error) {
		tg := referenceTarget(rcv, url)
		tg.Workflow, tg.ManifestFingerprint, tg.Pins = workflow, "mf-2", map[string]string{"server_version": "1.0.0"}
		return tg, nil
	}
	for _, replica := range []string{"replica-a", "replica-b"} {
		q, err := gates.NewQueue(gates.QueueConfig{Store: st, Runner: &gates.Runner{Build: "b1"}, Target: target, ReplicaID: replica,
			Interval: 20 * time.Millisecond, AfterPass: func(id int64) {
				if id != 0 {
					runs.Add(1)
					stored <- id
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(q.Stop)
	}
	var id int64
	select {
	case id = <-stored:
	case <-time.After(60 * time.Second):
		t.Fatal("no replica ran the queued gate")
	}
	if err := st.Complete(ctx, item.ID, "probe", 0); !errors.Is(err, gates.ErrLeased) {
		t.Fatalf("an expired lease completed the item: %v", err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs stored for one queued item", n)
	}
	if q, _ := st.Queue(ctx); len(q) != 0 {
		t.Fatalf("queue still open: %+v", q)
	}
	s, err = st.Latest(ctx, b)
	if err != nil || !s.Passing || s.Run.ID != id {
		t.Fatalf("after the repeat run: %+v %v", s, err)
	}
}

func TestTheQueueRechecksBindingsAndRepeatsTheRunOnAChange(t *testing.T) {
	t.Parallel()
	st := gates.NewStore(pgtest.New(t))
	ctx := context.Background()
	rcv, url := startReceiver(t, receiver.ErasLegacy)
	if _, _, err := st.Save(ctx, fakeRun("refund", "honoured", gates.Pass)); err != nil {
		t.Fatal(err)
	}
	var manifest atomic.Value
	manifest.Store("mf-1")
	binding := func() gates.Binding {
		return gates.Binding{Workflow: "refund", Server: "rcv", ManifestFingerprint: manifest.Load().(string), Build: "b1",
			Pins: map[string]string{"server_version": "1.0.0"}}
	}
	stored := make(chan int64, 4)
	q, err := gates.NewQueue(gates.QueueConfig{Store: st, Runner: &gates.Runner{Build: "b1"}, ReplicaID: "r1", Interval: 20 * time.Millisecond,
		RecheckEvery: 20 * time.Millisecond,
		Bindings:     func(context.Context) ([]gates.Binding, error) { return []gates.Binding{binding()}, nil },
		Target: func(workflow, server string) (gates.Target, error) {
			tg := referenceTarget(rcv, url)
			b := binding()
			tg.Workflow, tg.ManifestFingerprint, tg.Pins = workflow, b.ManifestFingerprint, b.Pins
			return tg, nil
		},
		AfterPass: func(id int64) {
			if id != 0 {
				stored <- id
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Stop)
	time.Sleep(100 * time.Millisecond) // several rechecks with nothing changed
	if len(stored) != 0 {
		t.Fatal("a run was repeated with no change")
	}
	manifest.Store("mf-2") // the gate server's manifest changed
	var id int64
	select {
	case id = <-stored:
	case <-time.After(60 * time.Second):
		t.Fatal("the change did not queue a run")
	}
	s, err := st.Latest(ctx, binding())
	if err != nil || !s.Passing || s.Run.ID != id {
		t.Fatalf("after the repeat run: %+v %v", s, err)
	}
	time.Sleep(100 * time.Millisecond)
	if len(stored) != 0 {
		t.Fatal("the evidence stayed stale after the repeat run")
	}
}

func TestRecheckDoesNotRequeueRightAfterARunThatCouldNotReachTheServer(t *testing.T) {
	t.Parallel()
	st := gates.NewStore(pgtest.New(t))
	ctx := context.Background()
	r := fakeRun("refund", "honoured", gates.Fail)
	r.Error = "connect: connection refused"
	if _, _, err := st.Save(ctx, r); err != nil {
		t.Fatal(err)
	}
	s, queued, err := st.Recheck(ctx, gates.Binding{Workflow: "refund", Server: "rcv", ManifestFingerprint: "mf-1", Build: "b1"})
	if err != nil || queued || s.State != gates.EvidenceMissing || !strings.Contains(strings.Join(s.Reasons, " "), "could not reach") {
		t.Fatalf("recheck after an unreachable run: %+v queued %v %v", s, queued, err)
	}
}
