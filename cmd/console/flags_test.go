package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/examples"
)

// TestKillAndFlagsCommands engages and releases switches and moves flags through a flagd file.
func TestKillAndFlagsCommands(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	console := func(env map[string]string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append(args, "--data-dir", dir), func(k string) string {
			if k == "USER" {
				return "ops"
			}
			return env[k]
		}, &out)
		return out.String(), err
	}
	must := func(env map[string]string, args ...string) string {
		t.Helper()
		out, err := console(env, args...)
		if err != nil {
			t.Fatalf("console %v: %v\n%s", args, err, out)
		}
		return out
	}
	if out := must(nil, "kill", "engage", "--workflow", "refund", "--reason", "bad deploy"); !strings.Contains(out, "kill-switch:workflow:refund engaged") {
		t.Errorf("engage:\n%s", out)
	}
	if _, err := console(nil, "kill", "engage", "--workflow", "refund"); err == nil {
		t.Error("engage without a reason was accepted")
	}
	if _, err := console(nil, "kill", "engage", "--workflow", "refund", "--all", "--reason", "x"); err == nil {
		t.Error("two switches at once were accepted")
	}
	export := filepath.Join(t.TempDir(), "flags.json")
	must(nil, "flags", "export", export)
	raw, _ := os.ReadFile(export)
	if !strings.Contains(string(raw), `"kill-switch:workflow:refund": false`) {
		t.Errorf("export does not hold the engaged switch:\n%s", raw)
	}
	four := map[string]string{"TASKGATE_KILL_RELEASE_FOUR_EYES": "1"}
	if out := must(four, "kill", "release", "--workflow", "refund", "--reason", "fixed"); !strings.Contains(out, "requested") {
		t.Errorf("four-eyes release:\n%s", out)
	}
	if _, err := console(nil, "kill", "release", "--approve", "--workflow", "refund", "--reason", "me again"); err == nil {
		t.Error("the asker approved their own release")
	}
	// A policy that asks for four eyes makes a plain release only a request, without the flag.
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, append(append([]byte{}, examples.Policy...), "\nkill_switch:\n  release_four_eyes: true\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	must(nil, "kill", "engage", "--all", "--reason", "incident")
	if out := must(map[string]string{"TASKGATE_CONFIG": policyFile}, "kill", "release", "--all", "--reason", "over"); !strings.Contains(out, "requested") {
		t.Errorf("a release under a four-eyes policy was not only a request:\n%s", out)
	}
	in := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(in, []byte(`{"flags":{"beta":{"state":"ENABLED","variants":{"on":true,"off":false},"defaultVariant":"off"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := must(nil, "flags", "import", in, "--reason", "from git"); !strings.Contains(out, "imported 1 flags") {
		t.Errorf("import:\n%s", out)
	}
	if err := os.WriteFile(in, []byte(`{"flags":{"beta":{"state":"MAYBE","variants":{}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := console(nil, "flags", "import", in, "--reason", "broken"); err == nil || !strings.Contains(err.Error(), "state") {
		t.Errorf("a malformed file was imported: %v", err)
	}
	if out := must(nil, "flags", "export"); !strings.Contains(out, `"beta"`) {
		t.Errorf("export after import:\n%s", out)
	}
}
