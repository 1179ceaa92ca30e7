package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/rollout"
)

// TestRolloutCommands moves a workflow through the CLI: promotion refused without gate
// evidence, naming it; pause, resume and rollback (from the example policy's full) recorded
// with their reasons.
func TestRolloutCommands(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	console := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append(args, "--data-dir", dir), func(k string) string {
			if k == "USER" {
				return "ops"
			}
			return ""
		}, &out)
		return out.String(), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := console(args...)
		if err != nil {
			t.Fatalf("console %v: %v\n%s", args, err, out)
		}
		return out
	}
	if _, err := console("rollout", "pause", "refund"); err == nil || !strings.Contains(err.Error(), "--reason") {
		t.Fatalf("pause without a reason: %v", err)
	}
	if _, err := console("rollout", "jump", "refund", "--reason", "x"); err == nil {
		t.Fatal("an unknown verb was accepted")
	}
	if _, err := console("rollout", "status", "nosuch"); err == nil {
		t.Fatal("an unknown workflow was accepted")
	}
	must("rollout", "pause", "refund", "--reason", "holiday freeze")
	if out := must("rollout", "status", "refund"); !strings.Contains(out, "paused: holiday freeze") || !strings.Contains(out, "pause by cli:ops") {
		t.Fatalf("status:\n%s", out)
	}
	must("rollout", "resume", "refund", "--reason", "freeze over")
	must("rollout", "rollback", "refund", "--reason", "bad canary")
	out, err := console("rollout", "promote", "refund", "--reason", "try")
	if !strings.Contains(out, "promote of refund refused") || !strings.Contains(out, "gate missing") || err == nil {
		t.Fatalf("promote without gates: %v\n%s", err, out)
	}
	var st rollout.Status
	if err := json.Unmarshal([]byte(must("rollout", "status", "refund", "--format", "json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Stage != rollout.StageOff || len(st.History) != 3 || st.History[0].Action != "rollback" || st.History[0].Reason != "bad canary" {
		t.Fatalf("after rollback: %+v", st)
	}
	// The rollback engaged the workflow's kill switch.
	if out := must("kill", "release", "--workflow", "refund", "--reason", "fixed"); !strings.Contains(out, "released") {
		t.Fatalf("release after rollback:\n%s", out)
	}
}
