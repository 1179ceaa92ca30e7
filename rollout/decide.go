// Package rollout decides, per operation, whether a workflow's call runs as an MCP Task or takes
// the policy's explicit fallback, and keeps the rollout state that decision depends on.
//
// Decide is a pure function from the workflow policy, the live capability manifest, the kill
// switch, the rollout stage (off, shadow, canary, full) and the tenant's canary bucket to exactly
// one route — task, sync, job_api, handoff or reject — with a machine-readable reason code and a
// sentence for people. It never augments a call without the capability, never sends a
// Task-required workflow as a long synchronous call and never plain-calls a tool whose mode is
// required. Router gathers the live inputs (manifest store, stage store, kill switch) and calls
// Decide; CheckCapacity applies the workflow's concurrency cap when an operation starts.
package rollout

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/murmur3"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
)

// Route is how one operation is executed.
type Route string

// Routes.
const (
	// RouteTask: a task-augmented tools/call (declaring the tasks extension on an
	// extension-era server).
	RouteTask Route = "task"
	// RouteSync: a plain tools/call bounded by the fallback's max_duration.
	RouteSync Route = "sync"
	// RouteJobAPI: the incumbent job API.
	RouteJobAPI Route = "job_api"
	// RouteHandoff: a person does the work.
	RouteHandoff Route = "handoff"
	// RouteReject: the operation is refused.
	RouteReject Route = "reject"
)

// Routes lists every route.
var Routes = []Route{RouteTask, RouteSync, RouteJobAPI, RouteHandoff, RouteReject}

// Stage is a workflow's rollout stage.
type Stage string

// Stages, in promotion order.
const (
	// StageOff: the incumbent (fallback) route serves every tenant.
	StageOff Stage = config.StageOff
	// StageShadow: the incumbent route executes; the Task route is only compared (a read-only
	// workflow may also run as a Task; an effectful one compares projected states only).
	StageShadow Stage = config.StageShadow
	// StageCanary: tenants whose bucket is below the canary percent take the Task route.
	StageCanary Stage = config.StageCanary
	// StageFull: every tenant takes the Task route when the server allows it.
	StageFull Stage = config.StageFull
)

// Stages lists every stage in promotion order.
var Stages = []Stage{StageOff, StageShadow, StageCanary, StageFull}

// ParseStage validates a stage name.
func ParseStage(s string) (Stage, error) {
	for _, st := range Stages {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("%w: %q (want off, shadow, canary or full)", ErrInvalidStage, s)
}

// ManifestState says how far the live manifest can be trusted.
type ManifestState string

// Manifest states.
const (
	// ManifestFresh: the latest probe succeeded recently enough.
	ManifestFresh ManifestState = "fresh"
	// ManifestStale: the latest successful probe is older than the staleness bound.
	ManifestStale ManifestState = "stale"
	// ManifestUnreachable: the latest probe failed.
	ManifestUnreachable ManifestState = "unreachable"
	// ManifestMissing: the server was never probed successfully.
	ManifestMissing ManifestState = "missing"
)

// Reason is a machine-readable reason code of a decision. The set is closed: Reasons lists it.
type Reason string

// Reason codes.
const (
	// ReasonTaskFull: stage full and the server offers Tasks for the tool.
	ReasonTaskFull Reason = "task_full"
	// ReasonTaskCanary: the tenant's bucket is inside the canary and the server offers Tasks.
	ReasonTaskCanary Reason = "task_canary"
	// ReasonTaskUseNever: the policy never uses Tasks for this workflow.
	ReasonTaskUseNever Reason = "task_use_never"
	// ReasonStageOff: the rollout stage is off.
	ReasonStageOff Reason = "stage_off"
	// ReasonShadow: shadow stage; the incumbent route executes.
	ReasonShadow Reason = "shadow_incumbent"
	// ReasonCanaryOut: canary stage and the tenant's bucket is outside the canary.
	ReasonCanaryOut Reason = "canary_out"
	// ReasonKillSwitch: the kill switch blocks new Task starts.
	ReasonKillSwitch Reason = "kill_switch"
	// ReasonKillSwitchUnknown: the kill switch could not be read; new Task starts fail safe
	// (blocked).
	ReasonKillSwitchUnknown Reason = "kill_switch_unknown"
	// ReasonManifestMissing: the server was never probed successfully.
	ReasonManifestMissing Reason = "manifest_missing"
	// ReasonManifestStale: the last successful probe is too old to rely on.
	ReasonManifestStale Reason = "manifest_stale"
	// ReasonServerUnreachable: the last probe of the server failed.
	ReasonServerUnreachable Reason = "server_unreachable"
	// ReasonNoTaskCapability: the server does not offer task-augmented tools/call (legacy
	// tasks.requests.tools.call absent, or the extension not advertised).
	ReasonNoTaskCapability Reason = "no_task_capability"
	// ReasonToolNotListed: the server does not list the workflow's tool.
	ReasonToolNotListed Reason = "tool_not_listed"
	// ReasonToolForbidsTask: the tool's mode is forbidden (or absent).
	ReasonToolForbidsTask Reason = "tool_forbids_task"
	// ReasonToolRequiresTask: the fallback would plain-call a tool whose mode is required.
	ReasonToolRequiresTask Reason = "tool_requires_task"
	// ReasonSyncTooLong: the fallback would send a Task-required workflow as a synchronous
	// call longer than MaxRequiredSync.
	ReasonSyncTooLong Reason = "sync_too_long"
	// ReasonExtensionRequired: an extension-era server answered a plain call with -32021 (the
	// tool runs only as a task); the call is not retried.
	ReasonExtensionRequired Reason = "extension_required"
	// ReasonAtCapacity: the workflow's concurrency cap is reached.
	ReasonAtCapacity Reason = "at_capacity"
)

// Reasons lists every reason code with its meaning, for documentation and pages.
var Reasons = map[Reason]string{
	ReasonTaskFull:          "rollout stage full and the server offers Tasks for the tool",
	ReasonTaskCanary:        "the tenant is inside the canary and the server offers Tasks for the tool",
	ReasonTaskUseNever:      "the policy never runs this workflow as a Task",
	ReasonStageOff:          "the rollout stage is off",
	ReasonShadow:            "shadow stage: the incumbent route executes",
	ReasonCanaryOut:         "the tenant is outside the canary",
	ReasonKillSwitch:        "the kill switch blocks new Task starts",
	ReasonKillSwitchUnknown: "the kill switch could not be read, so new Task starts are blocked",
	ReasonManifestMissing:   "the server was never probed successfully",
	ReasonManifestStale:     "the last successful probe is too old to rely on",
	ReasonServerUnreachable: "the last probe of the server failed",
	ReasonNoTaskCapability:  "the server does not offer task-augmented tool calls",
	ReasonToolNotListed:     "the server does not list the workflow's tool",
	ReasonToolForbidsTask:   "the tool does not support Task augmentation",
	ReasonToolRequiresTask:  "the tool runs only as a Task, so it is never called plainly",
	ReasonSyncTooLong:       "a Task-required workflow is never sent as a long synchronous call",
	ReasonExtensionRequired: "the server refused a plain call (-32021): the tool runs only as a Task",
	ReasonAtCapacity:        "the workflow's concurrency cap is reached",
}

// MaxRequiredSync is the longest synchronous call a Task-required workflow may fall back to.
const MaxRequiredSync = 30 * time.Second

// Sentinel errors.
var (
	// ErrInvalidStage: a stage name or canary percent is not valid.
	ErrInvalidStage = errors.New("invalid rollout stage")
	// ErrUnknownWorkflow: the workflow is not in the policy.
	ErrUnknownWorkflow = errors.New("workflow not in the policy")
	// ErrNotFound: no such row.
	ErrNotFound = errors.New("not found")
)

// Input is everything Decide looks at.
type Input struct {
	// Workflow is the workflow's policy.
	Workflow config.Workflow `json:"-"`
	// Manifest is the server's latest manifest; nil when missing.
	Manifest *manifests.Manifest `json:"-"`
	// Fingerprint is Manifest's fingerprint when already known (a stored version's); empty:
	// Decide computes it.
	Fingerprint string `json:"-"`
	// ManifestState says whether Manifest can be relied on.
	ManifestState ManifestState `json:"manifestState"`
	// KillSwitch is true when the kill switch blocks new Task starts.
	KillSwitch bool `json:"killSwitch"`
	// KillSwitchUnknown is true when the kill switch could not be read (treated as engaged).
	KillSwitchUnknown bool `json:"killSwitchUnknown,omitempty"`
	// KillSwitchName names the engaged switch ("kill-switch:workflow:refund").
	KillSwitchName string `json:"killSwitchName,omitempty"`
	// Stage is the workflow's rollout stage.
	Stage Stage `json:"stage"`
	// CanaryPercent is the share of buckets (0-100) inside the canary.
	CanaryPercent int `json:"canaryPercent"`
	// Bucket is the tenant's canary bucket, 0-99 (see Bucket).
	Bucket int `json:"bucket"`
	// CanaryFlag is the canary flag evaluated for the tenant ("" when the flag is not defined
	// and the stage's percent decided), CanaryVariant its answer (CanaryTask or
	// CanaryIncumbent). In the canary stage the flag's answer decides when it is set.
	CanaryFlag    string `json:"canaryFlag,omitempty"`
	CanaryVariant string `json:"canaryVariant,omitempty"`
}

// InsideCanary reports whether the tenant is inside the canary: the canary flag's answer when
// it gave one, otherwise its bucket against the stage's percent.
func (in Input) InsideCanary() bool {
	if in.CanaryVariant != "" {
		return in.CanaryVariant == CanaryTask
	}
	return InCanary(in.Bucket, in.CanaryPercent)
}

// canaryWords says what placed the tenant, for the decision's sentence.
func (in Input) canaryWords() string {
	if in.CanaryFlag != "" {
		return fmt.Sprintf("bucket %d of flag %s (%d%% canary)", in.Bucket, in.CanaryFlag, in.CanaryPercent)
	}
	return fmt.Sprintf("bucket %d (%d%% canary)", in.Bucket, in.CanaryPercent)
}

// Shadow says what shadow mode means for one decision.
type Shadow struct {
	// Applies is true in the shadow stage: the incumbent route executes.
	Applies bool `json:"applies"`
	// CompareAsTask is true when the workflow is read-only and the server offers Tasks: the
	// Task route may also run, to compare results. Effectful and reversible workflows never run
	// twice; they compare projected states only.
	CompareAsTask bool `json:"compareAsTask"`
}

// Decision is the route of one operation and why.
type Decision struct {
	// Route is the one route taken.
	Route Route `json:"route"`
	// Reason is the machine-readable reason code.
	Reason Reason `json:"reason"`
	// Sentence explains the decision to people.
	Sentence string `json:"sentence"`
	// DeclareExtension is true when the call must declare the tasks extension: the task route
	// on an extension-era server, and nothing else.
	DeclareExtension bool `json:"declareExtension"`
	// Shadow is set in the shadow stage.
	Shadow Shadow `json:"shadow"`
	// Era is the server's era from the manifest ("" when missing).
	Era mcpclient.Era `json:"era,omitempty"`
	// Fingerprint is the manifest fingerprint the decision relied on ("" when missing).
	Fingerprint string `json:"fingerprint,omitempty"`
	// MaxSync bounds the call on the sync route.
	MaxSync time.Duration `json:"maxSyncNs,omitempty"`
}

// CanaryFlagKey is the key of the flag that holds a workflow's canary percentage: a flagd
// flag whose targeting is fractional over the tenant (the targeting key), variant "task" for
// the share inside the canary and "incumbent" for the rest.
func CanaryFlagKey(workflow string) string { return "rollout-canary." + workflow }

// Canary flag variants.
const (
	// CanaryTask is the variant of tenants inside the canary (the Task route).
	CanaryTask = "task"
	// CanaryIncumbent is the variant of tenants outside it (the incumbent route).
	CanaryIncumbent = "incumbent"
)

// BucketOf is the bucket, 0-99, that flagd's fractional operation gives targetingKey for the
// flag flagKey when the weights total 100: the 32-bit MurmurHash3 (seed 0) h of flagKey
// followed by targetingKey, mapped to h*100 >> 32. A fractional split [[task, p], [incumbent,
// 100-p]] puts the key in task exactly when its bucket is below p.
func BucketOf(flagKey, targetingKey string) int {
	h := murmur3.StringSum32(flagKey + targetingKey)
	return int((uint64(h) * 100) >> 32)
}

// Bucket returns the tenant's canary bucket for a workflow, 0-99: BucketOf the workflow's
// canary flag key and the tenant. It is the bucket flagd would compute for the canary flag, so
// a tenant is on the same side of the canary on every replica and under flagd, and stays there
// while the percent does not fall.
func Bucket(workflow, tenant string) int { return BucketOf(CanaryFlagKey(workflow), tenant) }

// InCanary reports whether bucket is inside a canary of percent.
func InCanary(bucket, percent int) bool { return bucket < percent }

// Decide picks exactly one route for an operation. It is pure: the same input always gives the
// same decision.
func Decide(in Input) Decision {
	w := in.Workflow
	var d Decision
	if in.Manifest != nil {
		d.Era = in.Manifest.Era
		d.Fingerprint = in.Fingerprint
		if d.Fingerprint == "" {
			d.Fingerprint, _ = in.Manifest.Fingerprint()
		}
	}
	fallback := func(r Reason, why string) Decision {
		return d.withFallback(in, r, why)
	}
	if w.TaskUse == config.TaskNever {
		return fallback(ReasonTaskUseNever, "the policy never runs "+w.Name+" as a Task")
	}
	switch in.Stage {
	case StageShadow, StageCanary, StageFull:
	default:
		return fallback(ReasonStageOff, "the rollout stage of "+w.Name+" is off")
	}
	if in.KillSwitchUnknown {
		return fallback(ReasonKillSwitchUnknown, "the kill switch could not be read, so new Task starts are blocked")
	}
	if in.KillSwitch {
		name := in.KillSwitchName
		if name == "" {
			name = "kill-switch:workflow:" + w.Name
		}
		return fallback(ReasonKillSwitch, "the kill switch "+name+" blocks new Task starts")
	}
	capable := in.ManifestState == ManifestFresh && in.Manifest.TaskCapable(w.Tool)
	if in.Stage == StageShadow {
		d.Shadow = Shadow{Applies: true, CompareAsTask: capable && w.Effect == config.EffectReadOnly}
		why := "shadow stage: the incumbent route executes"
		if d.Shadow.CompareAsTask {
			why += " and the read-only Task route runs beside it to compare"
		} else {
			why += " and only projected states are compared"
		}
		return fallback(ReasonShadow, why)
	}
	if in.Stage == StageCanary && !in.InsideCanary() {
		return fallback(ReasonCanaryOut, "the tenant's "+in.canaryWords()+" is outside the canary")
	}
	switch in.ManifestState {
	case ManifestFresh:
	case ManifestStale:
		return fallback(ReasonManifestStale, "the last successful probe of "+w.Server+" is too old to rely on")
	case ManifestUnreachable:
		return fallback(ReasonServerUnreachable, "the last probe of "+w.Server+" failed")
	default:
		return fallback(ReasonManifestMissing, w.Server+" was never probed successfully")
	}
	if in.Manifest == nil {
		return fallback(ReasonManifestMissing, w.Server+" was never probed successfully")
	}
	m := in.Manifest
	if !m.Tasks.ToolsCall {
		if m.Era == mcpclient.EraExtension {
			return fallback(ReasonNoTaskCapability, w.Server+" does not advertise the tasks extension")
		}
		return fallback(ReasonNoTaskCapability, w.Server+" does not offer tasks.requests.tools.call")
	}
	t, ok := m.Tool(w.Tool)
	if !ok {
		return fallback(ReasonToolNotListed, w.Server+" does not list the tool "+w.Tool)
	}
	if m.Era == mcpclient.EraLegacy && t.Mode != manifests.ModeOptional && t.Mode != manifests.ModeRequired {
		return fallback(ReasonToolForbidsTask, "the tool "+w.Tool+" does not support Task augmentation")
	}
	d.Route = RouteTask
	d.DeclareExtension = m.Era == mcpclient.EraExtension
	if in.Stage == StageCanary {
		d.Reason = ReasonTaskCanary
		d.Sentence = fmt.Sprintf("Runs as a Task: the tenant's %s is inside the canary and %s offers Tasks for %s.", in.canaryWords(), w.Server, w.Tool)
	} else {
		d.Reason = ReasonTaskFull
		d.Sentence = fmt.Sprintf("Runs as a Task: the rollout stage is full and %s offers Tasks for %s.", w.Server, w.Tool)
	}
	if d.DeclareExtension {
		d.Sentence += " The call declares the tasks extension."
	}
	return d
}

// withFallback turns d into the policy's fallback route for reason r, refusing what the
// invariants forbid: a plain call to a required tool, a long sync call of a Task-required
// workflow, a plain call to a tool the server does not list.
func (d Decision) withFallback(in Input, r Reason, why string) Decision {
	w := in.Workflow
	d.Reason = r
	d.DeclareExtension = false
	switch w.Fallback.Kind {
	case config.FallbackSync:
		if w.TaskUse == config.TaskRequired && (w.Fallback.MaxDuration.Duration > MaxRequiredSync || w.Fallback.MaxDuration.Duration <= 0) {
			d.Route, d.Reason = RouteReject, ReasonSyncTooLong
			d.Sentence = fmt.Sprintf("Rejected: %s; the fallback would be a synchronous call of %s, and a Task-required workflow is never sent as a synchronous call longer than %s.", why, w.Fallback.MaxDuration.Duration, MaxRequiredSync)
			return d
		}
		if in.ManifestState == ManifestFresh && in.Manifest != nil {
			t, ok := in.Manifest.Tool(w.Tool)
			switch {
			case !ok:
				d.Route = RouteReject
				if r != ReasonToolNotListed {
					d.Reason = ReasonToolNotListed
				}
				d.Sentence = fmt.Sprintf("Rejected: %s, and the fallback is a plain call to %s, which %s does not list.", why, w.Tool, w.Server)
				return d
			case in.Manifest.Era == mcpclient.EraLegacy && t.Mode == manifests.ModeRequired:
				d.Route, d.Reason = RouteReject, ReasonToolRequiresTask
				d.Sentence = fmt.Sprintf("Rejected: %s, and the fallback would plain-call %s, whose mode is required.", why, w.Tool)
				return d
			}
		}
		d.Route, d.MaxSync = RouteSync, w.Fallback.MaxDuration.Duration
		d.Sentence = fmt.Sprintf("Synchronous call (at most %s): %s.", durationWords(w.Fallback.MaxDuration.Duration), why)
	case config.FallbackJobAPI:
		d.Route = RouteJobAPI
		d.Sentence = "Incumbent job API: " + why + "."
	case config.FallbackHandoff:
		d.Route = RouteHandoff
		d.Sentence = "Handed off to a person: " + why + "."
	default:
		d.Route = RouteReject
		d.Sentence = "Rejected (the policy's fallback): " + why + "."
	}
	return d
}

// Fallback turns the typed -32021 answer of an extension-era server to a plain call (the tool
// runs only as a task) into the policy's fallback. The plain call is never retried, neither
// plainly nor as a task: a sync fallback becomes reject, job_api and handoff stay as configured.
// ok is false when err is not a -32021 answer; the caller then handles err as usual.
func Fallback(w config.Workflow, d Decision, err error) (Decision, bool) {
	var ext *mcpclient.ExtensionRequiredError
	if !errors.As(err, &ext) {
		return d, false
	}
	out := Decision{Era: d.Era, Fingerprint: d.Fingerprint, Reason: ReasonExtensionRequired}
	why := "the server refused a plain call to " + w.Tool + " (-32021: it runs only as a Task); the call is not retried"
	switch w.Fallback.Kind {
	case config.FallbackJobAPI:
		out.Route, out.Sentence = RouteJobAPI, "Incumbent job API: "+why+"."
	case config.FallbackHandoff:
		out.Route, out.Sentence = RouteHandoff, "Handed off to a person: "+why+"."
	default:
		out.Route, out.Sentence = RouteReject, "Rejected: "+why+"."
	}
	return out, true
}

// durationWords says a policy duration as people write it: "300 ms", "2 s", "1.5 s", "30 min",
// "1 h 30 min".
func durationWords(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
	case d < time.Hour && d%time.Minute == 0:
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
}
