package killswitch

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/rollout"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var ops = audit.Actor{Name: "oncall@example.com", Kind: audit.KindAccount, Role: "operator"}

func open(t *testing.T, ctx context.Context, pool *pgxpool.Pool, cfg Config) *Service {
	t.Helper()
	s, err := Open(ctx, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func check(s *Service, workflow, server string) rollout.KillVerdict {
	return s.Check(context.Background(), rollout.StartCheck{Workflow: workflow, Server: server, Tenant: "acme"})
}

func TestSwitchesPerWorkflowServerAndGlobal(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := open(t, ctx, pgtest.New(t), Config{})
	if st, why := s.State(); st != StateReady {
		t.Fatalf("state %s: %s", st, why)
	}
	if v := check(s, "refund", "billing"); v.Blocked || v.FailedSafe {
		t.Fatalf("nothing engaged: %+v", v)
	}
	if err := s.Engage(ctx, ops, ScopeWorkflow, "refund", "bad deploy"); err != nil {
		t.Fatal(err)
	}
	if v := check(s, "refund", "billing"); !v.Blocked || v.Switch != "kill-switch:workflow:refund" || v.FailedSafe {
		t.Fatalf("refund engaged: %+v", v)
	}
	if v := check(s, "report", "billing"); v.Blocked {
		t.Fatalf("report is not covered: %+v", v)
	}
	if err := s.Engage(ctx, ops, ScopeServer, "billing", "server degraded"); err != nil {
		t.Fatal(err)
	}
	if v := check(s, "report", "billing"); !v.Blocked || v.Switch != "kill-switch:server:billing" {
		t.Fatalf("billing engaged: %+v", v)
	}
	if v := check(s, "report", "search"); v.Blocked {
		t.Fatalf("search is not covered: %+v", v)
	}
	if err := s.Engage(ctx, ops, ScopeGlobal, "", "incident"); err != nil {
		t.Fatal(err)
	}
	if v := check(s, "report", "search"); !v.Blocked || v.Switch != "kill-switch:global" {
		t.Fatalf("global engaged: %+v", v)
	}
	if _, err := s.Release(ctx, ops, ScopeGlobal, "", "resolved", false); err != nil {
		t.Fatal(err)
	}
	if v := check(s, "report", "search"); v.Blocked {
		t.Fatalf("global released: %+v", v)
	}
	if v := check(s, "refund", "search"); !v.Blocked {
		t.Fatalf("refund still engaged: %+v", v)
	}
	// Every change is audited with its reason and kept in the flag's history.
	hist, err := s.Store().History(ctx, NewTaskStarts.Key, 10)
	if err != nil || len(hist) != 5 || hist[0].Reason != "resolved" || hist[0].Actor != ops.Name {
		t.Fatalf("history %+v %v", hist, err)
	}
	page, err := audit.NewStore(s.pool).List(ctx, audit.Filter{AllTenants: true, Action: "killswitch.engage"})
	if err != nil {
		t.Fatal(err)
	}
	engages := 0
	for _, r := range page.Rows {
		if r.Action == "killswitch.engage" {
			engages++
		}
	}
	if engages != 3 {
		t.Errorf("audited engages = %d, want 3", engages)
	}
	// Bad input is refused with a clear error.
	for _, c := range []struct{ scope, name, reason string }{
		{ScopeWorkflow, "refund", ""}, {"planet", "x", "why"}, {ScopeGlobal, "x", "why"}, {ScopeServer, "bad name!", "why"},
		{ScopeWorkflow, "refund", strings.Repeat("x", MaxReason+1)},
	} {
		if err := s.Engage(ctx, ops, c.scope, c.name, c.reason); !errors.Is(err, ErrInvalid) {
			t.Errorf("engage %+v: %v", c, err)
		}
	}
	if _, err := s.Release(ctx, ops, ScopeServer, "never", "why", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("release of a switch never engaged: %v", err)
	}
}

func TestReleaseFourEyes(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := open(t, ctx, pgtest.New(t), Config{})
	if err := s.Engage(ctx, ops, ScopeWorkflow, "refund", "bad deploy"); err != nil {
		t.Fatal(err)
	}
	pending, err := s.Release(ctx, ops, ScopeWorkflow, "refund", "fixed", true)
	if err != nil || !pending {
		t.Fatalf("release request: %v %v", pending, err)
	}
	if v := check(s, "refund", "x"); !v.Blocked {
		t.Fatalf("a requested release does not release: %+v", v)
	}
	if err := s.Approve(ctx, ops, ScopeWorkflow, "refund", "self"); !errors.Is(err, ErrFourEyes) {
		t.Fatalf("self approval: %v", err)
	}
	other := audit.Actor{Name: "lead@example.com", Kind: audit.KindAccount, Role: "operator"}
	if err := s.Approve(ctx, other, ScopeWorkflow, "refund", "checked"); err != nil {
		t.Fatal(err)
	}
	if v := check(s, "refund", "x"); v.Blocked {
		t.Fatalf("approved release: %+v", v)
	}
	if err := s.Approve(ctx, other, ScopeWorkflow, "refund", "again"); !errors.Is(err, ErrNotFound) {
		t.Errorf("approval with nothing pending: %v", err)
	}
}

// Two services on one database stand for two console replicas: a switch engaged through one
// refuses the next start on the other within a second, through LISTEN/NOTIFY alone.
func TestPropagationToAnotherReplica(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := pgtest.New(t)
	a := open(t, ctx, pool, Config{ResyncEvery: time.Hour})
	b := open(t, ctx, pool, Config{ResyncEvery: time.Hour})
	if v := check(b, "refund", "billing"); v.Blocked {
		t.Fatalf("before: %+v", v)
	}
	if err := a.Engage(ctx, ops, ScopeWorkflow, "refund", "incident"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for check(b, "refund", "billing").Blocked == false {
		if time.Since(start) > time.Second {
			t.Fatal("the other replica still starts refund a second after the switch")
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("propagated in %s", time.Since(start))
	if _, err := a.Release(ctx, ops, ScopeWorkflow, "refund", "fixed", false); err != nil {
		t.Fatal(err)
	}
	for start = time.Now(); check(b, "refund", "billing").Blocked; time.Sleep(2 * time.Millisecond) {
		if time.Since(start) > time.Second {
			t.Fatal("release did not reach the other replica within a second")
		}
	}
}

func TestFailSafe(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	pool := pgtest.New(t)

	t.Run("outage", func(t *testing.T) {
		// A replica whose database is gone from the start answers the fail-safe default.
		bad, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		s := open(t, ctx, bad, Config{})
		if st, _ := s.State(); st != StateError {
			t.Errorf("state %s, want ERROR", st)
		}
		if s.Ready() == nil {
			t.Error("an unloaded provider reports ready")
		}
		v := check(s, "refund", "billing")
		if !v.Blocked || !v.FailedSafe || !strings.Contains(v.Why, ErrorProviderNotReady) {
			t.Fatalf("outage: %+v", v)
		}
		allowed, r := s.Bool(NewTaskStarts, StartContext("acme", "refund", "billing", ""))
		if allowed || r.Reason != ReasonFailedSafe {
			t.Fatalf("outage: %v %+v", allowed, r)
		}
	})
	t.Run("stale", func(t *testing.T) {
		// A replica that lost its notifications answers from cache only for MaxStale.
		clock := time.Now()
		s := open(t, ctx, pool, Config{MaxStale: time.Second, Now: func() time.Time { return clock }})
		s.setState(StateStale, "notifications lost")
		if v := check(s, "refund", "x"); v.Blocked {
			t.Fatalf("briefly stale: %+v", v)
		}
		clock = clock.Add(2 * time.Second)
		if v := check(s, "refund", "x"); !v.Blocked || !v.FailedSafe {
			t.Fatalf("stale too long: %+v", v)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		s := open(t, ctx, pool, Config{})
		if _, err := pool.Exec(ctx, `UPDATE flags SET definition = '{"state":"ENABLED","variants":{}}' WHERE key = $1`, NewTaskStarts.Key); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		v := check(s, "refund", "x")
		if !v.Blocked || !v.FailedSafe || !strings.Contains(v.Why, ErrorParse) {
			t.Fatalf("malformed: %+v", v)
		}
	})
	t.Run("type mismatch", func(t *testing.T) {
		s := open(t, ctx, pool, Config{})
		if _, err := pool.Exec(ctx, `UPDATE flags SET definition = '{"state":"ENABLED","variants":{"on":"yes"},"defaultVariant":"on"}' WHERE key = $1`, NewTaskStarts.Key); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		v := check(s, "refund", "x")
		if !v.Blocked || !v.FailedSafe || !strings.Contains(v.Why, ErrorTypeMismatch) {
			t.Fatalf("type mismatch: %+v", v)
		}
	})
	t.Run("missing", func(t *testing.T) {
		s := open(t, ctx, pool, Config{})
		if _, err := pool.Exec(ctx, `DELETE FROM flags WHERE key = $1`, NewTaskStarts.Key); err != nil {
			t.Fatal(err)
		}
		if err := s.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		v := check(s, "refund", "x")
		if !v.Blocked || !v.FailedSafe || !strings.Contains(v.Why, ErrorFlagNotFound) {
			t.Fatalf("missing: %+v", v)
		}
	})
}

func TestFlagChangesHistoryRevertAndImport(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := open(t, ctx, pgtest.New(t), Config{})
	st := s.Store()
	on := "on"
	f := Flag{State: StateEnabled, Variants: map[string]any{"on": true, "off": false}, DefaultVariant: &on}
	if err := st.PutFlag(ctx, ops, "task-mode.refund", f, "try tasks"); err != nil {
		t.Fatal(err)
	}
	off := "off"
	f.DefaultVariant = &off
	if err := st.PutFlag(ctx, ops, "task-mode.refund", f, "roll back"); err != nil {
		t.Fatal(err)
	}
	if err := st.PutFlag(ctx, ops, NewTaskStarts.Key, f, "sneaky"); !errors.Is(err, ErrInvalid) {
		t.Errorf("the kill switch flag is not edited directly: %v", err)
	}
	if err := st.PutFlag(ctx, ops, "task-mode.refund", f, " "); !errors.Is(err, ErrInvalid) {
		t.Errorf("a change needs a reason: %v", err)
	}
	hist, err := st.History(ctx, "task-mode.refund", 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("history %+v %v", hist, err)
	}
	diff := strings.Join(Diff(hist[0].Before, hist[0].After), "\n")
	if !strings.Contains(diff, `-   "defaultVariant": "on"`) || !strings.Contains(diff, `+   "defaultVariant": "off"`) {
		t.Errorf("diff:\n%s", diff)
	}
	if err := st.Revert(ctx, ops, hist[0].ID, "off was wrong"); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r := s.Evaluate("task-mode.refund", nil); r.Variant != "on" || r.Value != true {
		t.Fatalf("after revert: %+v", r)
	}
	// Import a flagd document with a shared evaluator, then export it back.
	doc, err := ParseDocument([]byte(`{"flags":{"beta":{"state":"ENABLED","variants":{"yes":true,"no":false},"defaultVariant":"no",
		"targeting":{"if":[{"$ref":"acme"},"yes",null]}}},"$evaluators":{"acme":{"starts_with":[{"var":"tenant"},"acme"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := st.Import(ctx, ops, doc, "from git"); err != nil || n != 1 {
		t.Fatalf("import %d %v", n, err)
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if r := s.Evaluate("beta", map[string]any{"tenant": "acme-eu"}); r.Value != true || r.Reason != ReasonTargetingMatch {
		t.Errorf("acme-eu: %+v", r)
	}
	if r := s.Evaluate("beta", map[string]any{"tenant": "globex"}); r.Value != false || r.Reason != ReasonDefault {
		t.Errorf("globex: %+v", r)
	}
	out, _ := json.Marshal(s.Snapshot().Document())
	back, err := ParseDocument(out)
	if err != nil || len(back.Flags) != 3 || len(back.Evaluators) != 1 {
		t.Fatalf("export %s: %v", out, err)
	}
}

func TestEngageAuditNamesTheSwitch(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	s := open(t, ctx, pgtest.New(t), Config{})
	if err := s.Engage(ctx, ops, ScopeServer, "billing", "degraded"); err != nil {
		t.Fatal(err)
	}
	page, err := audit.NewStore(s.pool).List(ctx, audit.Filter{AllTenants: true, Action: "killswitch.engage"})
	if err != nil || len(page.Rows) != 1 || page.Rows[0].Target != "kill-switch:server:billing" || page.Rows[0].Reason != "degraded" {
		t.Fatalf("%+v %v", page.Rows, err)
	}
}
