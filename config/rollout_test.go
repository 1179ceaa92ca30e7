package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/config"
)

func TestRolloutPlanDefaultsAndErrors(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(base + "    rollout: {steps: [2, 20], hold: 10m, on_breach: pause_and_kill, pins: {server_version: '1.2', allowed_tools: [b, a]}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := c.Workflow("wf")
	p := w.Plan()
	if len(p.Steps) != 2 || p.Hold.Duration != 10*time.Minute || !*p.RequireGates || p.OnBreach != config.OnBreachPauseAndKill ||
		p.Thresholds.Window.Duration != 15*time.Minute || p.Thresholds.MinOperations != 10 {
		t.Fatalf("plan %+v", p)
	}
	if m := p.Pins.Map(); m["server_version"] != "1.2" || m["allowed_tools"] != "[a b]" || len(m) != 2 {
		t.Fatalf("pins %v", m)
	}
	c, _ = config.Parse([]byte(base))
	w, _ = c.Workflow("wf")
	if p := w.Plan(); len(p.Steps) != 5 || p.Hold.Duration != time.Hour || p.OnBreach != config.OnBreachPause {
		t.Fatalf("default plan %+v", p)
	}
	for _, tc := range []struct{ plan, field, msg string }{
		{"{steps: [5, 5]}", "workflows[0].rollout.steps[1]", "steps must rise"},
		{"{steps: [0]}", "workflows[0].rollout.steps[0]", "want 1 to 100"},
		{"{on_breach: panic}", "workflows[0].rollout.on_breach", "want pause or pause_and_kill"},
		{"{thresholds: {failure_rate: 2}}", "workflows[0].rollout.thresholds.failure_rate", "want 0 to 1"},
		{"{pins: {concurrency: -1}}", "workflows[0].rollout.pins.concurrency", "must not be negative"},
		{"{pins: {task_support: {t: sometimes}}}", "workflows[0].rollout.pins.task_support.t", "want forbidden, optional, required or server-decides"},
	} {
		_, err := config.Parse([]byte(base + "    rollout: " + tc.plan + "\n"))
		var es config.Errors
		if !errors.As(err, &es) {
			t.Fatalf("%s: want validation errors, got %v", tc.plan, err)
		}
		found := false
		for _, e := range es {
			if e.Field == tc.field && strings.Contains(e.Msg, tc.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no %q at %s in %v", tc.plan, tc.msg, tc.field, err)
		}
	}
}

func TestRolloutPolicyPinsBindIntoEvidence(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(base + "    rollout: {pins: {max_ttl: 5m, concurrency: 4, status_retention: 48h, owners: [b, a], task_support: {y: required, x: optional}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	w, _ := c.Workflow("wf")
	p := w.Plan().Pins
	if p.MaxTTL.Duration != 5*time.Minute || *p.Concurrency != 4 || p.StatusRetention.Duration != 48*time.Hour || len(p.Owners) != 2 {
		t.Fatalf("pins %+v", p)
	}
	want := map[string]string{"max_ttl": "5m0s", "concurrency": "4", "status_retention": "48h0m0s", "owners": "[a b]",
		"task_support.x": "optional", "task_support.y": "required"}
	m := p.Map()
	if len(m) != len(want) {
		t.Fatalf("pins map %v", m)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("pin %s = %q, want %q", k, m[k], v)
		}
	}
}
