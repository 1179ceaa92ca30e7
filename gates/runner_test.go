package gates_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/internal/mcptest"
	"github.com/taskgate/taskgate/receiver"
)

// startReceiver serves the reference receiver of one era on 127.0.0.1 with two identities.
func startReceiver(t testing.TB, eras receiver.Eras) (*receiver.Receiver, string) {
	t.Helper()
	rcv := receiver.New(receiver.Config{Eras: eras, DefaultPollInterval: 30 * time.Millisecond, MaxTTL: time.Minute,
		Tokens: map[string]receiver.Identity{"tok-acme": {Tenant: "acme", Actor: "gate"}, "tok-globex": {Tenant: "globex", Actor: "gate2"}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rcv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); rcv.Close() })
	return rcv, "http://" + ln.Addr().String() + "/mcp"
}

// referenceTarget is the gate target of the reference receiver, as a policy would describe it.
func referenceTarget(rcv *receiver.Receiver, url string) gates.Target {
	return gates.Target{Name: "rcv", URL: url, Token: "tok-acme", SecondToken: "tok-globex", Effectful: true, GateTarget: true,
		IdempotencyArgument: "idempotency_key",
		Quick:               &gates.ToolCase{Tool: "work_optional", Arguments: map[string]any{"duration_ms": 30}},
		Slow:                &gates.ToolCase{Tool: "work_required", Arguments: map[string]any{"duration_ms": 1500}},
		Input:               &gates.ToolCase{Tool: "work_required", Arguments: map[string]any{"outcome": "input"}},
		Fail:                &gates.ToolCase{Tool: "work_required", Arguments: map[string]any{"outcome": "tool_error"}},
		Verify: func(ctx context.Context, key string) (int, error) {
			if r, ok := rcv.Records().Get(key); ok && r.Status == receiver.RecordApplied {
				return 1, nil
			}
			return 0, nil
		}}
}

func summary(r *gates.Run) string {
	var sb strings.Builder
	for _, c := range r.Cases {
		sb.WriteString(string(c.Suite) + "/" + c.Name + ": " + string(c.Verdict) + " (" + c.Duration.Round(time.Millisecond).String() + ") — " + c.Reason + "\n")
	}
	return sb.String()
}

func TestEverySuitePassesAgainstTheReferenceReceiver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		eras receiver.Eras
	}{{"legacy", receiver.ErasLegacy}, {"extension", receiver.ErasExtension}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv, url := startReceiver(t, tc.eras)
			run := (&gates.Runner{Build: "test", CaseTimeout: 20 * time.Second}).Run(context.Background(), referenceTarget(rcv, url), nil)
			t.Log("\n" + summary(run))
			for _, n := range run.Deviations.Names() {
				t.Logf("deviation %s: %+v", n, run.Deviations[n])
			}
			if run.Verdict != gates.Pass || len(run.HardFailures) > 0 {
				t.Fatalf("run %s (hard %v, error %q)", run.Verdict, run.HardFailures, run.Error)
			}
			suites := map[gates.Suite]int{}
			for _, c := range run.Cases {
				if c.Verdict == gates.Pass {
					suites[c.Suite]++
				}
				if c.Verdict == gates.Pass && len(c.Evidence.Messages) == 0 && (c.Suite == gates.SuiteFault || c.Suite == gates.SuiteSecurity) && c.Name != "secret-not-echoed" {
					t.Errorf("%s/%s passed without any message as evidence", c.Suite, c.Name)
				}
			}
			for _, s := range gates.Suites {
				if suites[s] == 0 {
					t.Errorf("suite %s has no passing case", s)
				}
			}
			if c := rcv.Counters(); c.InvalidTransitions != 0 || c.Effects == 0 {
				t.Fatalf("receiver counters %+v", c)
			}
			if run.DeviationFingerprint == "" || run.Deviations[gates.DevToolErrorStatus].Deviates {
				t.Fatalf("deviations %+v", run.Deviations)
			}
		})
	}
}

func TestAnEffectfulToolIsNotRunAgainstAServerThatIsNotAGateTarget(t *testing.T) {
	t.Parallel()
	rcv, url := startReceiver(t, receiver.ErasLegacy)
	tg := referenceTarget(rcv, url)
	tg.GateTarget = false
	run := (&gates.Runner{Build: "test"}).Run(context.Background(), tg, []gates.Suite{gates.SuiteContract, gates.SuiteFault})
	if n := rcv.Counters().ToolCalls; len(n) != 0 {
		t.Fatalf("tools were called: %v", n)
	}
	for _, c := range run.Cases {
		if c.Verdict == gates.Inconclusive && strings.Contains(c.Reason, "not marked as a gate target") {
			return
		}
	}
	t.Fatalf("no case said why it did not run:\n%s", summary(run))
}

func TestServerEverythingReportsItsDeviations(t *testing.T) {
	t.Parallel()
	url := mcptest.StartEverything(t)
	run := (&gates.Runner{Build: "test", CaseTimeout: 20 * time.Second}).Run(context.Background(),
		gates.Target{Name: "everything", URL: url, GateTarget: true}, nil)
	t.Log("\n" + summary(run))
	for _, n := range run.Deviations.Names() {
		t.Logf("deviation %s: %+v", n, run.Deviations[n])
	}
	if run.Error != "" || run.Era != "2025-11-25" {
		t.Fatalf("run error %q era %s", run.Error, run.Era)
	}
	decided := 0
	for _, c := range run.Cases {
		if c.Verdict != gates.Inconclusive {
			decided++
		}
	}
	if decided < 5 {
		t.Fatalf("only %d cases decided:\n%s", decided, summary(run))
	}
	// server-everything 2026.8.31 answers an unknown session 400 and replaces a requested ttl.
	wantDeviation(t, run, gates.DevUnknownSession, "400")
	wantDeviation(t, run, gates.DevRequestedTTL, "replaced by a longer ttl")
	wantCase(t, run, "invalid-task-id", gates.Fail, "-32603")
	if run.Verdict != gates.Fail {
		t.Fatalf("verdict %s: the unknown-session answer breaks a rule and must fail the run", run.Verdict)
	}
}

func wantDeviation(t *testing.T, run *gates.Run, name, observed string) {
	t.Helper()
	if d := run.Deviations[name]; d.Observed != observed {
		t.Errorf("deviation %s = %+v, want %q", name, d, observed)
	}
}

func TestMCPGoReportsItsDeviations(t *testing.T) {
	t.Parallel()
	url := mcptest.StartMCPGo(t, true)
	run := (&gates.Runner{Build: "test", CaseTimeout: 10 * time.Second}).Run(context.Background(),
		gates.Target{Name: "mcpgo", URL: url, GateTarget: true, Slow: &gates.ToolCase{Tool: "slow", Arguments: map[string]any{"duration_ms": 3000}}}, nil)
	t.Log("\n" + summary(run))
	for _, n := range run.Deviations.Names() {
		t.Logf("deviation %s: %+v", n, run.Deviations[n])
	}
	if run.Error != "" || run.Era != "2025-11-25" {
		t.Fatalf("run error %q era %s", run.Error, run.Era)
	}
	// mcp-go v1.2.1 suggests no pollInterval and binds task ids to the MCP session.
	wantDeviation(t, run, gates.DevPollInterval, "absent")
	wantDeviation(t, run, gates.DevSessionBound, "bound to the session")
	wantDeviation(t, run, gates.DevUnknownSession, "404")
	// Its task tools run under the creating request's context (cancelled once the
	// CreateTaskResult is sent), and a numeric task id is answered -32600, not -32602.
	wantDeviation(t, run, gates.DevCancelOnRequestEnd, "cancelled without a cancel request")
	wantCase(t, run, "outlives-request", gates.Fail, "cancelled without a cancel request")
	wantCase(t, run, "invalid-task-id", gates.Fail, "-32600")
	if run.Verdict != gates.Fail {
		t.Fatalf("verdict %s: tasks cancelled with their creating request must fail the run", run.Verdict)
	}
}

func wantCase(t *testing.T, run *gates.Run, name string, v gates.Verdict, reason string) {
	t.Helper()
	for _, c := range run.Cases {
		if c.Name == name {
			if c.Verdict != v || !strings.Contains(c.Reason, reason) {
				t.Errorf("case %s: %s — %s; want %s naming %q", name, c.Verdict, c.Reason, v, reason)
			}
			return
		}
	}
	t.Errorf("no case %s", name)
}

func TestTypeScriptSDKTaskServerReportsItsDeviations(t *testing.T) {
	t.Parallel()
	sdk := mcptest.StartSDKServer(t)
	run := (&gates.Runner{Build: "test", CaseTimeout: 10 * time.Second}).Run(context.Background(), gates.Target{Name: "sdk", URL: sdk.URL,
		GateTarget: true, Effectful: true,
		Quick: &gates.ToolCase{Tool: "slow_job", Arguments: map[string]any{"duration_ms": 30}},
		Slow:  &gates.ToolCase{Tool: "slow_job", Arguments: map[string]any{"duration_ms": 2000}},
		Fail:  &gates.ToolCase{Tool: "slow_job", Arguments: map[string]any{"outcome": "failed"}}}, nil)
	t.Log("\n" + summary(run))
	for _, n := range run.Deviations.Names() {
		t.Logf("deviation %s: %+v", n, run.Deviations[n])
	}
	if run.Error != "" || run.Era != "2025-11-25" {
		t.Fatalf("run error %q era %s", run.Error, run.Era)
	}
	// The SDK's task store binds each task to the session that created it.
	wantDeviation(t, run, gates.DevSessionBound, "bound to the session")
	wantDeviation(t, run, gates.DevToolErrorStatus, "failed")
}

func TestAServerThatSharesTasksBetweenIdentitiesFailsAHardGate(t *testing.T) {
	t.Parallel()
	// Both tokens map to one tenant: the server cannot tell the gate's two identities apart.
	rcv := receiver.New(receiver.Config{Eras: receiver.ErasLegacy, DefaultPollInterval: 30 * time.Millisecond,
		Tokens: map[string]receiver.Identity{"tok-one": {Tenant: "acme"}, "tok-two": {Tenant: "acme"}}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rcv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); rcv.Close() })
	tg := referenceTarget(rcv, "http://"+ln.Addr().String()+"/mcp")
	tg.Token, tg.SecondToken = "tok-one", "tok-two"
	run := (&gates.Runner{Build: "test"}).Run(context.Background(), tg, []gates.Suite{gates.SuiteContract, gates.SuiteSecurity})
	if run.Verdict != gates.Fail || len(run.HardFailures) != 1 || run.HardFailures[0] != gates.HardCrossIdentity {
		t.Fatalf("verdict %s hard %v:\n%s", run.Verdict, run.HardFailures, summary(run))
	}
	for _, c := range run.Cases {
		if c.Name == "cross-identity-list" && c.Verdict != gates.Fail {
			t.Fatalf("a list that shows another identity's task was not failed: %+v", c)
		}
	}
}
