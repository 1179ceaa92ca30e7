package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/manifests"
)

// ManifestSource gives what is known of a server now (implemented by *manifests.Store).
type ManifestSource interface {
	Status(ctx context.Context, server string) (manifests.Status, error)
}

// StageSource gives a workflow's rollout state (implemented by *Store).
type StageSource interface {
	Get(ctx context.Context, workflow string) (State, error)
}

// RouterConfig configures a Router.
type RouterConfig struct {
	// Policy is the policy in force (required).
	Policy *config.Config
	// Manifests gives the live manifests (required).
	Manifests ManifestSource
	// Stages gives rollout stages (required).
	Stages StageSource
	// KillSwitch blocks new Task starts (required). A read error fails safe: blocked.
	KillSwitch KillSwitch
	// Canary answers the workflow's canary flag for a tenant (optional: without it, or when the
	// flag is not defined, the stage's percent and the tenant's bucket decide, which is the
	// same split). The killswitch package's Service implements it.
	Canary CanaryFlags
	// StaleAfter is how many probe_every periods a manifest stays fresh after the last
	// successful probe (default 3).
	StaleAfter int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Logger receives kill switch read errors (default slog.Default()).
	Logger *slog.Logger
	// CacheFor, when positive, keeps each workflow's stage and each server's manifest status
	// in memory for at most this long, so a start reads neither; Changed forgets them at once
	// when a change notification names them (the console calls it from its change listener).
	// CacheFor bounds how stale a decision's inputs can be when a change sends no notification
	// (a probe, a stage set outside the rollout controller). Zero reads them for every decision.
	CacheFor time.Duration
}

// CanaryFlags evaluates a workflow's canary flag (CanaryFlagKey) with the tenant as the
// targeting key, from memory. ok is false when the flag is not defined or could not be
// evaluated; variant is CanaryTask or CanaryIncumbent otherwise.
type CanaryFlags interface {
	CanaryVariant(workflow, tenant string) (variant string, ok bool)
}

// Router gathers the live inputs of a decision and calls Decide.
type Router struct {
	cfg RouterConfig

	mu        sync.Mutex
	gen       uint64 // bumped by every forget: a read begun before it is not kept
	stages    map[string]cached[State]
	manifests map[string]cached[manifests.Status]
}

// cached is a route input read at a time.
type cached[T any] struct {
	v  T
	at time.Time
}

// NewRouter validates cfg and returns a Router.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if cfg.Policy == nil || cfg.Manifests == nil || cfg.Stages == nil || cfg.KillSwitch == nil {
		return nil, errors.New("rollout: RouterConfig needs Policy, Manifests, Stages and KillSwitch")
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 3
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Router{cfg: cfg, stages: map[string]cached[State]{}, manifests: map[string]cached[manifests.Status]{}}, nil
}

// Changed is told the area of every change notification (audit.Change.Area): a rollout move
// or a probe an operator asked for makes the cached route inputs be read again.
func (r *Router) Changed(area string) {
	switch area {
	case "rollout", "server":
		r.Forget()
	}
}

// Forget drops every cached route input.
func (r *Router) Forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	clear(r.stages)
	clear(r.manifests)
}

// load returns m[key] when it is younger than CacheFor, otherwise read's answer, kept unless a
// Forget came while it was read.
func load[T any](r *Router, m map[string]cached[T], key string, read func() (T, error)) (T, error) {
	if r.cfg.CacheFor <= 0 {
		return read()
	}
	now := time.Now()
	r.mu.Lock()
	c, ok := m[key]
	gen := r.gen
	r.mu.Unlock()
	if ok && now.Sub(c.at) < r.cfg.CacheFor {
		return c.v, nil
	}
	v, err := read()
	if err != nil {
		return v, err
	}
	r.mu.Lock()
	if r.gen == gen {
		m[key] = cached[T]{v: v, at: now}
	}
	r.mu.Unlock()
	return v, nil
}

// Routed is a decision with the inputs it was made from, for people and for the ledger.
type Routed struct {
	// Decision is Decide's answer.
	Decision Decision `json:"decision"`
	// Input is what Decide saw (the workflow and manifest are summarised beside it).
	Input Input `json:"input"`
	// Workflow, Tenant, Server and Tool name the operation.
	Workflow string `json:"workflow"`
	Tenant   string `json:"tenant"`
	Server   string `json:"server"`
	Tool     string `json:"tool"`
	// TaskUse, Effect and Fallback summarise the policy.
	TaskUse  string `json:"taskUse"`
	Effect   string `json:"effect"`
	Fallback string `json:"fallback"`
	// ToolMode is the tool's mode in the manifest ("" when not listed or no manifest).
	ToolMode string `json:"toolMode,omitempty"`
	// ManifestID is the manifest version relied on (0 when missing).
	ManifestID int64 `json:"manifestId,omitempty"`
	// LastSuccess is when the server last answered a probe.
	LastSuccess time.Time `json:"lastSuccess"`
	// StageFromPolicy is true when the stage is the policy file's default.
	StageFromPolicy bool `json:"stageFromPolicy"`
	// PromotionPausedReason is why promotion is paused, if it is.
	PromotionPausedReason string `json:"promotionPausedReason,omitempty"`
	// KillSwitchError is why the kill switch could not be read ("" when it could).
	KillSwitchError string `json:"killSwitchError,omitempty"`
	// Shadow is, in the shadow stage, the decision the Task route would have made (the
	// incumbent executes; this is only recorded and compared, never executed).
	Shadow *Decision `json:"shadow,omitempty"`
	// At is when the decision was made.
	At time.Time `json:"at"`
	// Step is the canary step index in force (see State.Step).
	Step int `json:"step"`
	// Steps is how many canary steps the workflow's plan has.
	Steps int `json:"steps"`
}

// RouteContext is what sent one operation to its route, kept on its ledger row: the stage,
// the canary step and percent, the flag that placed the tenant and the tenant's bucket.
type RouteContext struct {
	Stage      Stage `json:"stage"`
	FromPolicy bool  `json:"fromPolicy,omitempty"`
	// Step is the canary step, counted from 1 (0 outside the canary), of Steps.
	Step    int `json:"step,omitempty"`
	Steps   int `json:"steps,omitempty"`
	Percent int `json:"percent"`
	// Flag is the flag whose answer placed the tenant: the canary flag in the canary stage, the
	// kill switch's flag when a switch blocked the start; Variant is its answer.
	Flag    string `json:"flag,omitempty"`
	Variant string `json:"variant,omitempty"`
	// Bucket is the tenant's canary bucket, 0-99.
	Bucket int `json:"bucket"`
	// ShadowRoute is, in shadow, the route the Task route would have taken.
	ShadowRoute Route `json:"shadowRoute,omitempty"`
}

// Context returns the decision's rollout context.
func (r Routed) Context() RouteContext {
	c := RouteContext{Stage: r.Input.Stage, FromPolicy: r.StageFromPolicy, Bucket: r.Input.Bucket}
	switch r.Input.Stage {
	case StageCanary:
		c.Step, c.Steps, c.Percent = r.Step+1, r.Steps, r.Input.CanaryPercent
		c.Flag, c.Variant = r.Input.CanaryFlag, r.Input.CanaryVariant
		if c.Flag == "" {
			c.Variant = CanaryIncumbent
			if InCanary(r.Input.Bucket, r.Input.CanaryPercent) {
				c.Variant = CanaryTask
			}
		}
	case StageFull:
		c.Percent = 100
	}
	if r.Input.KillSwitch {
		c.Flag, c.Variant = "new-task-starts", r.Input.KillSwitchName
	}
	if r.Shadow != nil {
		c.ShadowRoute = r.Shadow.Route
	}
	return c
}

// JSON is the context as stored on the operation's row.
func (c RouteContext) JSON() json.RawMessage {
	b, _ := json.Marshal(c)
	return b
}

// Words says the context for a row: "canary step 2 of 5 (25%) · flag rollout-canary.refund:
// task · bucket 17".
func (c RouteContext) Words() string {
	var parts []string
	switch c.Stage {
	case StageCanary:
		parts = append(parts, fmt.Sprintf("canary step %d of %d (%d%%)", c.Step, c.Steps, c.Percent))
	case StageShadow:
		s := "shadow"
		if c.ShadowRoute != "" {
			s += ", Task route would go " + string(c.ShadowRoute)
		}
		parts = append(parts, s)
	case "":
	default:
		parts = append(parts, string(c.Stage))
	}
	if c.FromPolicy && c.Stage != "" {
		parts[0] += " (policy file)"
	}
	if c.Flag != "" {
		f := "flag " + c.Flag
		if c.Variant != "" {
			f += ": " + c.Variant
		}
		parts = append(parts, f)
	} else if c.Stage == StageCanary && c.Variant != "" {
		parts = append(parts, "percent: "+c.Variant)
	}
	if c.Stage == StageCanary || c.Stage == StageShadow {
		parts = append(parts, fmt.Sprintf("bucket %d", c.Bucket))
	}
	return strings.Join(parts, " · ")
}

// Route decides the route of an operation of workflow for tenant right now.
func (r *Router) Route(ctx context.Context, workflow, tenant string) (Routed, error) {
	w, ok := r.cfg.Policy.Workflow(workflow)
	if !ok {
		return Routed{}, fmt.Errorf("route %s: %w", workflow, ErrUnknownWorkflow)
	}
	now := r.cfg.Now()
	out := Routed{Workflow: w.Name, Tenant: tenant, Server: w.Server, Tool: w.Tool, TaskUse: w.TaskUse,
		Effect: w.Effect, Fallback: w.Fallback.Kind, At: now.UTC()}
	st, err := load(r, r.stages, w.Name, func() (State, error) { return r.cfg.Stages.Get(ctx, w.Name) })
	if err != nil {
		return out, fmt.Errorf("route %s: %w", workflow, err)
	}
	out.StageFromPolicy, out.PromotionPausedReason = st.FromPolicy, st.PromotionPausedReason
	ms, err := load(r, r.manifests, w.Server, func() (manifests.Status, error) { return r.cfg.Manifests.Status(ctx, w.Server) })
	if err != nil {
		return out, fmt.Errorf("route %s: %w", workflow, err)
	}
	in := Input{Workflow: *w, Stage: st.Stage, CanaryPercent: st.CanaryPercent, Bucket: Bucket(w.Name, tenant)}
	out.Step, out.Steps = st.Step, len(w.Plan().Steps)
	if r.cfg.Canary != nil && st.Stage == StageCanary {
		if v, ok := r.cfg.Canary.CanaryVariant(w.Name, tenant); ok {
			in.CanaryFlag, in.CanaryVariant = CanaryFlagKey(w.Name), v
		}
	}
	in.ManifestState = r.manifestState(ms, now)
	if ms.Latest != nil {
		in.Manifest, in.Fingerprint = ms.Latest.Manifest, ms.Latest.Fingerprint
		out.ManifestID = ms.Latest.ID
		if t, ok := in.Manifest.Tool(w.Tool); ok {
			out.ToolMode = t.Mode
		}
	}
	out.LastSuccess = ms.LastSuccess
	kv := r.cfg.KillSwitch.Check(ctx, StartCheck{Workflow: w.Name, Server: w.Server, Tenant: tenant})
	switch {
	case kv.FailedSafe:
		r.cfg.Logger.ErrorContext(ctx, "kill switch unreadable: new Task starts blocked", "workflow", w.Name, "err", kv.Why)
		in.KillSwitchUnknown = true
		out.KillSwitchError = kv.Why
	case kv.Blocked:
		in.KillSwitch, in.KillSwitchName = true, kv.Switch
	}
	out.Input = in
	out.Decision = Decide(in)
	if in.Stage == StageShadow {
		projected := in
		projected.Stage = StageFull
		d := Decide(projected)
		out.Shadow = &d
	}
	return out, nil
}

// manifestState classifies what is known of the server.
func (r *Router) manifestState(ms manifests.Status, now time.Time) ManifestState {
	if ms.LastProbe != nil && !ms.LastProbe.OK {
		return ManifestUnreachable
	}
	if ms.Latest == nil {
		return ManifestMissing
	}
	every := 5 * time.Minute
	if s, ok := r.cfg.Policy.Server(ms.Server); ok && s.ProbeEvery.Duration > 0 {
		every = s.ProbeEvery.Duration
	}
	if now.Sub(ms.LastSuccess) > time.Duration(r.cfg.StaleAfter)*every {
		return ManifestStale
	}
	return ManifestFresh
}
