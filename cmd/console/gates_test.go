package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/receiver"
)

const gatePolicy = `
tenants: [acme]
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: prod, url: "%[1]s", era: legacy}
  - {name: staging, url: "%[1]s", era: legacy, gate_target: true}
workflows:
  - name: refund
    server: prod
    tool: work_required
    effect: effectful
    task_use: required
    fallback: {kind: reject}
    owners: [ops]
    idempotency_argument: idempotency_key
    gate:
      server: %[2]s
      quick: {tool: work_optional, arguments: {duration_ms: 20}}
      slow: {tool: work_required, arguments: {duration_ms: 1000}}
      input: {tool: work_required, arguments: {outcome: input}}
      fail: {tool: work_required, arguments: {outcome: tool_error}}
`

func writeGatePolicy(t *testing.T, url, gateServer string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(p, fmt.Appendf(nil, gatePolicy, url, gateServer), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGatesRunPrintsCasesAsJSONAndPassesOnTheReferenceReceiver(t *testing.T) {
	t.Parallel()
	url := referenceReceiver(t, receiver.ErasLegacy)
	pol := writeGatePolicy(t, url, "staging")
	var out bytes.Buffer
	err := run(testCtx(t), []string{"gates", "run", "--workflow", "refund", "--suite", "contract", "--suite", "fault",
		"--json", "--store=false", "--config", pol, "--pin", "server_version=1.0.0"}, func(string) string { return "" }, &out)
	if err != nil {
		t.Fatalf("gates run: %v\n%s", err, out.String())
	}
	var got struct {
		Verdict  string            `json:"verdict"`
		Workflow string            `json:"workflow"`
		Pins     map[string]string `json:"pins"`
		Manifest string            `json:"manifest_fingerprint"`
		Cases    []struct {
			Suite, Name, Verdict, Reason string
		} `json:"cases"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if got.Verdict != "pass" || got.Workflow != "refund" || got.Pins["server_version"] != "1.0.0" || got.Manifest == "" {
		t.Fatalf("run %+v", got)
	}
	suites := map[string]bool{}
	for _, c := range got.Cases {
		suites[c.Suite] = true
	}
	if !suites["contract"] || !suites["fault"] || len(suites) != 2 {
		t.Fatalf("suites run: %v", suites)
	}
}

func TestGatesRunRefusesEffectfulCallsOffTheGateTargetAndFailsOnAnUnreachableServer(t *testing.T) {
	t.Parallel()
	url := referenceReceiver(t, receiver.ErasLegacy)
	pol := writeGatePolicy(t, url, "prod")
	var out bytes.Buffer
	if err := run(testCtx(t), []string{"gates", "run", "--workflow", "refund", "--suite", "fault", "--store=false", "--config", pol},
		func(string) string { return "" }, &out); err != nil {
		t.Fatalf("gates run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "not marked as a gate target") || !strings.Contains(out.String(), "SUITE") {
		t.Fatalf("table:\n%s", out.String())
	}
	out.Reset()
	err := run(testCtx(t), []string{"gates", "run", "--server", "http://127.0.0.1:1/mcp", "--store=false"}, func(string) string { return "" }, &out)
	if !errors.Is(err, errGateFailed) || !strings.Contains(out.String(), "verdict fail") {
		t.Fatalf("unreachable server: %v\n%s", err, out.String())
	}
	if err := run(testCtx(t), []string{"gates", "run", "--server", url, "--suite", "nope", "--store=false"}, func(string) string { return "" }, &out); err == nil ||
		!strings.Contains(err.Error(), "unknown suite") {
		t.Fatalf("bad suite: %v", err)
	}
}
