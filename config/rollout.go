package config

import (
	"fmt"
	"maps"
	"slices"
)

// RolloutPlan is how a workflow moves from off through shadow and canary to full: the canary
// steps, how long each must stay healthy, the gates it requires, the analysis thresholds and
// what crossing one does, and the pins a drift from which pauses the rollout.
type RolloutPlan struct {
	// Steps are the canary percentages in order, each 1 to 100 and rising (default 1, 5, 25,
	// 50, 100).
	Steps []int `yaml:"steps"`
	// Hold is how long a step (and the shadow stage) must stay healthy before promotion
	// (default 1h; 0s allowed).
	Hold *Duration `yaml:"hold"`
	// RequireGates is true when promotion needs passing gate evidence for the current manifest
	// fingerprint, deviation fingerprint, build and pins (default true).
	RequireGates *bool `yaml:"require_gates"`
	// Thresholds are the analysis limits; crossing one does OnBreach.
	Thresholds Thresholds `yaml:"thresholds"`
	// OnBreach is "pause" (default) or "pause_and_kill" (also engage the workflow's kill switch).
	OnBreach string `yaml:"on_breach"`
	// Pins are what the rollout was approved against; a drift pauses it.
	Pins Pins `yaml:"pins"`
}

// Thresholds bound the canary's live health beside the incumbent route over one window.
type Thresholds struct {
	// Window is the analysis window (default 15m).
	Window Duration `yaml:"window"`
	// MinOperations is how many canary operations the window needs before it is judged
	// (default 10).
	MinOperations int `yaml:"min_operations"`
	// FailureRate is the highest share (0-1) of canary operations that may fail (0 = not checked).
	FailureRate float64 `yaml:"failure_rate"`
	// UnknownRate is the highest share (0-1) of canary operations whose outcome is unknown.
	UnknownRate float64 `yaml:"unknown_rate"`
	// MaxExcessFailureRate is how far the canary's failure rate may exceed the incumbent's
	// (0 = not checked).
	MaxExcessFailureRate float64 `yaml:"max_excess_failure_rate"`
}

// Pins are what a rollout was approved against. Empty fields are not pinned.
type Pins struct {
	ProtocolVersion     string   `yaml:"protocol_version"`
	Build               string   `yaml:"build"`
	ManifestFingerprint string   `yaml:"manifest_fingerprint"`
	ServerVersion       string   `yaml:"server_version"`
	AllowedTools        []string `yaml:"allowed_tools"`
	KillSwitchFlag      string   `yaml:"kill_switch_flag"`
	// MaxTTL, Concurrency, StatusRetention and Owners pin the workflow's policy values the
	// rollout was approved with (nil / empty: not pinned).
	MaxTTL          *Duration `yaml:"max_ttl"`
	Concurrency     *int      `yaml:"concurrency"`
	StatusRetention *Duration `yaml:"status_retention"`
	Owners          []string  `yaml:"owners"`
	// TaskSupport pins each named tool's execution.taskSupport as the server lists it
	// (forbidden, optional, required, or server-decides in the extension era).
	TaskSupport map[string]string `yaml:"task_support"`
}

// TaskSupportModes are the values a task_support pin may take.
var TaskSupportModes = []string{"forbidden", "optional", "required", "server-decides"}

// Map gives the pins as name → value for gate bindings (unpinned fields left out).
func (p Pins) Map() map[string]string {
	m := map[string]string{}
	add := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	add("protocol_version", p.ProtocolVersion)
	add("build", p.Build)
	add("manifest_fingerprint", p.ManifestFingerprint)
	add("server_version", p.ServerVersion)
	add("kill_switch_flag", p.KillSwitchFlag)
	if len(p.AllowedTools) > 0 {
		t := slices.Clone(p.AllowedTools)
		slices.Sort(t)
		add("allowed_tools", fmt.Sprint(t))
	}
	if p.MaxTTL != nil {
		add("max_ttl", p.MaxTTL.String())
	}
	if p.Concurrency != nil {
		add("concurrency", fmt.Sprint(*p.Concurrency))
	}
	if p.StatusRetention != nil {
		add("status_retention", p.StatusRetention.String())
	}
	if len(p.Owners) > 0 {
		o := slices.Clone(p.Owners)
		slices.Sort(o)
		add("owners", fmt.Sprint(o))
	}
	for _, tool := range slices.Sorted(maps.Keys(p.TaskSupport)) {
		add("task_support."+tool, p.TaskSupport[tool])
	}
	return m
}

// Rollout breach actions.
const (
	OnBreachPause        = "pause"
	OnBreachPauseAndKill = "pause_and_kill"
)

// DefaultSteps are the canary steps of a plan that names none.
var DefaultSteps = []int{1, 5, 25, 50, 100}

// Plan returns the workflow's rollout plan with defaults filled in.
func (w *Workflow) Plan() RolloutPlan {
	var p RolloutPlan
	if w.Rollout != nil {
		p = *w.Rollout
	}
	if len(p.Steps) == 0 {
		p.Steps = DefaultSteps
	}
	if p.Hold == nil {
		p.Hold = &Duration{Duration: 3600e9}
	}
	if p.RequireGates == nil {
		t := true
		p.RequireGates = &t
	}
	if p.OnBreach == "" {
		p.OnBreach = OnBreachPause
	}
	if p.Thresholds.Window.Duration <= 0 {
		p.Thresholds.Window.Duration = 15 * 60e9
	}
	if p.Thresholds.MinOperations <= 0 {
		p.Thresholds.MinOperations = 10
	}
	return p
}

// validateRollout checks a plan; at reports a problem at a path under the workflow.
func validateRollout(p *RolloutPlan, at func(msg string, path ...any)) {
	if p == nil {
		return
	}
	prev := 0
	for i, s := range p.Steps {
		if s < 1 || s > 100 {
			at("want 1 to 100", "rollout", "steps", i)
		} else if s <= prev {
			at("steps must rise", "rollout", "steps", i)
		}
		prev = s
	}
	if p.Hold != nil && p.Hold.Duration < 0 {
		at("must not be negative", "rollout", "hold")
	}
	switch p.OnBreach {
	case "", OnBreachPause, OnBreachPauseAndKill:
	default:
		at("want pause or pause_and_kill", "rollout", "on_breach")
	}
	for name, v := range map[string]float64{"failure_rate": p.Thresholds.FailureRate, "unknown_rate": p.Thresholds.UnknownRate,
		"max_excess_failure_rate": p.Thresholds.MaxExcessFailureRate} {
		if v < 0 || v > 1 {
			at("want 0 to 1", "rollout", "thresholds", name)
		}
	}
	if p.Pins.Concurrency != nil && *p.Pins.Concurrency < 0 {
		at("must not be negative", "rollout", "pins", "concurrency")
	}
	for tool, mode := range p.Pins.TaskSupport {
		if !slices.Contains(TaskSupportModes, mode) {
			at("want forbidden, optional, required or server-decides", "rollout", "pins", "task_support", tool)
		}
	}
	if p.Thresholds.MinOperations < 0 {
		at("must not be negative", "rollout", "thresholds", "min_operations")
	}
}
