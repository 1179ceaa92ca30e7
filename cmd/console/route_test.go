package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/internal/mcptest"
	"github.com/taskgate/taskgate/rollout"
)

// TestProbeSaveThenRoute saves a manifest with "probe --save" and routes with "route": a
// Task-capable tool at stage full takes the task route; a peer that lost Tasks takes the
// fallback, and the saved change is reported.
func TestProbeSaveThenRoute(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dir := dataDir(t)
	url := mcptest.StartMCPGo(t, true)
	policy := filepath.Join(dir, "policy.yaml")
	yaml := `servers:
  - name: peer
    url: ` + url + `
owners: [{name: team}]
workflows:
  - {name: report, server: peer, tool: report, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 5s}, owners: [team], stage: full}
`
	if err := os.WriteFile(policy, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(string) string { return "" }
	var out bytes.Buffer
	if err := runProbe(ctx, []string{url, "--save", "--config", policy, "--data-dir", dir}, &out); err != nil {
		t.Fatalf("probe --save: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "saved manifest version 1 of peer") {
		t.Fatalf("probe --save output:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"route", "report", "--tenant", "acme", "--format", "json", "--config", policy, "--data-dir", dir}, env, &out); err != nil {
		t.Fatalf("route: %v\n%s", err, out.String())
	}
	var r rollout.Routed
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("route json: %v\n%s", err, out.String())
	}
	if r.Decision.Route != rollout.RouteTask || r.Decision.Reason != rollout.ReasonTaskFull || r.Tenant != "acme" || r.ManifestID != 1 {
		t.Fatalf("decision %+v", r)
	}
	out.Reset()
	if err := run(ctx, []string{"route", "report", "--tenant", "acme", "--config", policy, "--data-dir", dir}, env, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"route     task", "reason    task_full", "stage     full (policy default)", "kill switch released", "canary bucket"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(ctx, []string{"route", "report", "--config", policy, "--data-dir", dir}, env, &out); err == nil {
		t.Error("route without --tenant succeeded")
	}
	if err := run(ctx, []string{"route", "nope", "--tenant", "acme", "--config", policy, "--data-dir", dir}, env, &out); err == nil {
		t.Error("route of an unknown workflow succeeded")
	}
	if err := runProbe(ctx, []string{mcptest.StartMCPGo(t, false), "--save", "--config", policy, "--data-dir", dir}, &out); err == nil {
		t.Error("probe --save of a URL outside the policy succeeded")
	}
}
