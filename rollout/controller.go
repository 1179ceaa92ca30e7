package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/gates"
	"github.com/taskgate/taskgate/manifests"
)

// ErrRefused is returned (wrapped in a *Refusal) when a move may not be made now.
var ErrRefused = errors.New("rollout move refused")

// Refusal says why a move was refused, one reason per missing or stale verdict, pause or hold.
type Refusal struct {
	Action  string
	Reasons []string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s refused: %s", r.Action, strings.Join(r.Reasons, "; "))
}

// Is makes errors.Is(err, ErrRefused) true.
func (r *Refusal) Is(target error) bool { return target == ErrRefused }

// EvidenceSource gives a workflow's latest gate evidence for a binding (*gates.Store).
type EvidenceSource interface {
	Latest(ctx context.Context, b gates.Binding) (gates.Status, error)
}

// LatestManifest gives a server's latest recorded manifest (*manifests.Store).
type LatestManifest interface {
	Latest(ctx context.Context, server string) (manifests.Version, error)
}

// KillEngager engages a kill switch (*killswitch.Service); scope is "workflow", name the
// workflow.
type KillEngager interface {
	Engage(ctx context.Context, actor audit.Actor, scope, name, reason string) error
}

// CanaryWriter writes a workflow's canary flag (CanaryFlagKey) at percent inside the move's
// transaction (*killswitch.Service).
type CanaryWriter interface {
	PutCanaryTx(ctx context.Context, tx pgx.Tx, actor audit.Actor, workflow string, percent int, reason string) error
}

// flagPercent is the canary flag's percent for a stage: the step's in the canary, all at full,
// none before.
func flagPercent(stage Stage, pct int) int {
	switch stage {
	case StageCanary:
		return pct
	case StageFull:
		return 100
	}
	return 0
}

// ControllerConfig configures a Controller.
type ControllerConfig struct {
	Policy    *config.Config
	Pool      *pgxpool.Pool
	Evidence  EvidenceSource
	Manifests LatestManifest
	// Kill engages the kill switch on rollback and on a breach whose plan says so (nil: the
	// move is made and the switch is reported as not engaged).
	Kill KillEngager
	// Canary writes the workflow's canary flag whenever a move changes the percent in force
	// (nil: the percent is kept only in the rollout state, and routers fall back to it).
	Canary CanaryWriter
	// Build is this build of Taskgate, bound into gate evidence.
	Build string
	Now   func() time.Time
}

// Controller moves workflows through their rollout stages, one audited move at a time.
type Controller struct {
	cfg    ControllerConfig
	stages *Store
}

// NewController validates cfg and returns a Controller.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Policy == nil || cfg.Pool == nil || cfg.Evidence == nil || cfg.Manifests == nil {
		return nil, errors.New("rollout: ControllerConfig needs Policy, Pool, Evidence and Manifests")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Controller{cfg: cfg, stages: NewStore(cfg.Pool, cfg.Policy)}, nil
}

// Stages is the stage store the controller writes (for a Router).
func (c *Controller) Stages() *Store { return c.stages }

// Move is one recorded rollout move.
type Move struct {
	ID        int64           `json:"id"`
	Action    string          `json:"action"`
	FromStage Stage           `json:"fromStage"`
	FromStep  int             `json:"fromStep"`
	ToStage   Stage           `json:"toStage"`
	ToStep    int             `json:"toStep"`
	ToPercent int             `json:"toPercent"`
	Actor     string          `json:"actor"`
	Reason    string          `json:"reason"`
	Detail    json.RawMessage `json:"detail,omitempty"`
	At        time.Time       `json:"at"`
}

// Status is a workflow's rollout as the console, CLI and API show it.
type Status struct {
	Workflow string `json:"workflow"`
	Stage    Stage  `json:"stage"`
	// Step is the index into Plan.Steps in the canary stage.
	Step    int `json:"step"`
	Percent int `json:"percent"`
	// StepSince is when the current stage or step began (zero: set by the policy file).
	StepSince time.Time `json:"stepSince"`
	// Paused is why the rollout is paused ("" = not paused).
	Paused string `json:"paused,omitempty"`
	// Next is the stage and percent a promotion would move to ("" at full).
	Next        Stage `json:"next,omitempty"`
	NextPercent int   `json:"nextPercent"`
	// HeldFor is how long the current step has been held, HoldLeft how long it still must.
	HeldFor  time.Duration `json:"heldFor"`
	HoldLeft time.Duration `json:"holdLeft"`
	// Binding is what gate evidence must match; Evidence is the latest evidence against it.
	Binding  gates.Binding      `json:"binding"`
	Evidence gates.Status       `json:"evidence"`
	Plan     config.RolloutPlan `json:"plan"`
	// Drift lists the pins the live manifest no longer matches.
	Drift   []string `json:"drift,omitempty"`
	History []Move   `json:"history"`
}

func (c *Controller) workflow(name string) (*config.Workflow, error) {
	w, ok := c.cfg.Policy.Workflow(name)
	if !ok {
		return nil, fmt.Errorf("rollout of %q: %w", name, ErrUnknownWorkflow)
	}
	return w, nil
}

// Status returns the workflow's rollout: stage, step, pause, next move, gate evidence, pin
// drift and history.
func (c *Controller) Status(ctx context.Context, workflow string) (Status, error) {
	w, err := c.workflow(workflow)
	if err != nil {
		return Status{}, err
	}
	plan := w.Plan()
	st, err := c.stages.Get(ctx, w.Name)
	if err != nil {
		return Status{}, err
	}
	out := Status{Workflow: w.Name, Stage: st.Stage, Percent: st.CanaryPercent, Paused: st.PromotionPausedReason, Plan: plan}
	var since *time.Time
	err = c.cfg.Pool.QueryRow(ctx, `SELECT step, step_since FROM workflow_rollouts WHERE workflow = $1`, w.Name).Scan(&out.Step, &since)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Status{}, fmt.Errorf("rollout of %s: %w", w.Name, err)
	}
	if since != nil {
		out.StepSince = *since
		out.HeldFor = c.cfg.Now().Sub(*since)
		out.HoldLeft = max(plan.Hold.Duration-out.HeldFor, 0)
	}
	out.Next, out.NextPercent, _ = next(plan, out.Stage, out.Step)
	server := w.Server
	if w.Gate != nil && w.Gate.Server != "" {
		server = w.Gate.Server
	}
	out.Binding = gates.Binding{Workflow: w.Name, Server: server, Build: c.cfg.Build, Pins: plan.Pins.Map()}
	if len(out.Binding.Pins) == 0 {
		out.Binding.Pins = nil
	}
	live, merr := c.cfg.Manifests.Latest(ctx, server)
	if merr == nil {
		out.Binding.ManifestFingerprint = live.Fingerprint
	}
	if out.Evidence, err = c.cfg.Evidence.Latest(ctx, out.Binding); err != nil {
		return Status{}, err
	}
	if merr != nil {
		out.Evidence.Passing = false
		out.Evidence.Reasons = append(out.Evidence.Reasons, "no manifest recorded for "+server)
	}
	if lw, err := c.cfg.Manifests.Latest(ctx, w.Server); err == nil {
		out.Drift = drift(plan.Pins, c.cfg.Build, w, lw)
	}
	if out.History, err = c.History(ctx, w.Name, 50); err != nil {
		return Status{}, err
	}
	return out, nil
}

// next is the move a promotion makes from stage/step: off → shadow → each canary step → full.
func next(plan config.RolloutPlan, stage Stage, step int) (Stage, int, int) {
	switch stage {
	case StageOff:
		return StageShadow, 0, 0
	case StageShadow:
		return StageCanary, plan.Steps[0], 0
	case StageCanary:
		if step+1 < len(plan.Steps) {
			return StageCanary, plan.Steps[step+1], step + 1
		}
		return StageFull, 100, 0
	}
	return "", 0, 0
}

// drift lists how the live manifest v and the workflow's policy in force depart from the pins.
func drift(p config.Pins, build string, w *config.Workflow, v manifests.Version) []string {
	var out []string
	if p.MaxTTL != nil && w.MaxTTL.Duration != p.MaxTTL.Duration {
		out = append(out, fmt.Sprintf("max TTL is %s, pinned %s", w.MaxTTL.Duration, p.MaxTTL.Duration))
	}
	if p.Concurrency != nil && w.Concurrency != *p.Concurrency {
		out = append(out, fmt.Sprintf("concurrency is %d, pinned %d", w.Concurrency, *p.Concurrency))
	}
	if p.StatusRetention != nil && w.StatusRetention.Duration != p.StatusRetention.Duration {
		out = append(out, fmt.Sprintf("status retention is %s, pinned %s", w.StatusRetention.Duration, p.StatusRetention.Duration))
	}
	if len(p.Owners) > 0 {
		have, want := slices.Sorted(slices.Values(w.Owners)), slices.Sorted(slices.Values(p.Owners))
		if !slices.Equal(have, want) {
			out = append(out, fmt.Sprintf("owners are %s, pinned %s", strings.Join(have, ", "), strings.Join(want, ", ")))
		}
	}
	if p.ManifestFingerprint != "" && v.Fingerprint != p.ManifestFingerprint {
		out = append(out, fmt.Sprintf("manifest fingerprint is %s, pinned %s", shortFP(v.Fingerprint), shortFP(p.ManifestFingerprint)))
	}
	if p.Build != "" && build != p.Build {
		out = append(out, fmt.Sprintf("build is %s, pinned %s", build, p.Build))
	}
	if m := v.Manifest; m != nil {
		if p.ProtocolVersion != "" && m.ProtocolVersion != p.ProtocolVersion {
			out = append(out, fmt.Sprintf("protocol version is %s, pinned %s", m.ProtocolVersion, p.ProtocolVersion))
		}
		if p.ServerVersion != "" && m.ServerVersion != p.ServerVersion {
			out = append(out, fmt.Sprintf("server version is %s, pinned %s", m.ServerVersion, p.ServerVersion))
		}
		for _, name := range p.AllowedTools {
			if _, ok := m.Tool(name); !ok {
				out = append(out, fmt.Sprintf("allowed tool %s is no longer listed", name))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(p.TaskSupport)) {
			want := p.TaskSupport[name]
			t, ok := m.Tool(name)
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("tool %s (taskSupport pinned %s) is no longer listed", name, want))
			case t.Mode != want:
				out = append(out, fmt.Sprintf("tool %s taskSupport is %s, pinned %s", name, t.Mode, want))
			}
		}
	}
	return out
}

func shortFP(fp string) string {
	if len(fp) > 16 {
		return fp[:16]
	}
	if fp == "" {
		return "(none)"
	}
	return fp
}

// Promote moves the workflow one stage or step forward. It is refused, naming each reason,
// while the rollout is paused, while the current step has not been held for the plan's hold
// time, while the canary's analysis since the step began crosses a threshold, when the pins
// drifted, and (unless the plan says otherwise) unless the latest gate
// verdicts passed for the current manifest fingerprint, deviation fingerprint, build and pins.
func (c *Controller) Promote(ctx context.Context, actor audit.Actor, workflow, reason string) (Status, error) {
	if err := needReason(reason); err != nil {
		return Status{}, err
	}
	st, err := c.Status(ctx, workflow)
	if err != nil {
		return Status{}, err
	}
	if st.Next == "" {
		return st, &Refusal{Action: "promote", Reasons: []string{"already at full"}}
	}
	var why []string
	if st.Paused != "" {
		why = append(why, "paused: "+st.Paused)
	}
	if !st.StepSince.IsZero() && st.Stage != StageOff && st.HoldLeft > 0 {
		why = append(why, fmt.Sprintf("%s step held %s of %s", st.Stage, st.HeldFor.Round(time.Second), st.Plan.Hold.Duration))
	}
	for _, d := range st.Drift {
		why = append(why, "pin drift: "+d)
	}
	if st.Stage == StageCanary {
		// The step must have stayed healthy: the analysis since the step began (within the
		// plan's window) must cross no threshold. A pause for a breach restarts the hold.
		a, err := c.Analyze(ctx, workflow)
		if err != nil {
			return st, err
		}
		for _, b := range a.Breaches {
			why = append(why, "unhealthy in this step: "+b)
		}
	}
	if *st.Plan.RequireGates && !st.Evidence.Passing {
		if len(st.Evidence.Reasons) == 0 {
			why = append(why, "gate evidence "+st.Evidence.State+" and not passing")
		}
		for _, r := range st.Evidence.Reasons {
			why = append(why, "gate "+st.Evidence.State+": "+r)
		}
	}
	if len(why) > 0 {
		return st, &Refusal{Action: "promote", Reasons: why}
	}
	_, pct, step := next(st.Plan, st.Stage, st.Step)
	detail := map[string]any{"gateRun": st.Evidence.Run, "binding": st.Binding}
	if err := c.move(ctx, actor, st, "promote", st.Next, step, pct, reason, "", detail); err != nil {
		return Status{}, err
	}
	return c.Status(ctx, workflow)
}

// Pause stops promotion with the reason; the stage in force stays.
func (c *Controller) Pause(ctx context.Context, actor audit.Actor, workflow, reason string) (Status, error) {
	return c.pause(ctx, actor, workflow, "pause", reason, nil)
}

func (c *Controller) pause(ctx context.Context, actor audit.Actor, workflow, action, reason string, detail any) (Status, error) {
	if err := needReason(reason); err != nil {
		return Status{}, err
	}
	st, err := c.Status(ctx, workflow)
	if err != nil {
		return Status{}, err
	}
	if st.Paused != "" {
		return st, &Refusal{Action: action, Reasons: []string{"already paused: " + st.Paused}}
	}
	if err := c.move(ctx, actor, st, action, st.Stage, st.Step, st.Percent, reason, reason, detail); err != nil {
		return Status{}, err
	}
	return c.Status(ctx, workflow)
}

// Resume clears a pause; the hold time starts again.
func (c *Controller) Resume(ctx context.Context, actor audit.Actor, workflow, reason string) (Status, error) {
	if err := needReason(reason); err != nil {
		return Status{}, err
	}
	st, err := c.Status(ctx, workflow)
	if err != nil {
		return Status{}, err
	}
	if st.Paused == "" {
		return st, &Refusal{Action: "resume", Reasons: []string{"not paused"}}
	}
	if err := c.move(ctx, actor, st, "resume", st.Stage, st.Step, st.Percent, reason, "", nil); err != nil {
		return Status{}, err
	}
	return c.Status(ctx, workflow)
}

// Rollback engages the workflow's kill switch (new Task starts take the fallback; watchers
// keep watching what is in flight) and moves the stage back to off. Re-enabling starts again
// from shadow.
func (c *Controller) Rollback(ctx context.Context, actor audit.Actor, workflow, reason string) (Status, error) {
	if err := needReason(reason); err != nil {
		return Status{}, err
	}
	st, err := c.Status(ctx, workflow)
	if err != nil {
		return Status{}, err
	}
	engaged := false
	if c.cfg.Kill != nil {
		if err := c.cfg.Kill.Engage(ctx, actor, "workflow", st.Workflow, "rollback: "+reason); err != nil {
			return Status{}, fmt.Errorf("rollback of %s: engage kill switch: %w", st.Workflow, err)
		}
		engaged = true
	}
	if err := c.move(ctx, actor, st, "rollback", StageOff, 0, 0, reason, "", map[string]any{"killSwitchEngaged": engaged}); err != nil {
		return Status{}, err
	}
	return c.Status(ctx, workflow)
}

// CheckDrift pauses the rollout, with the reason, when the live manifest departs from a pin.
// It returns the drift found (nil when none) and whether it paused.
func (c *Controller) CheckDrift(ctx context.Context, workflow string) ([]string, bool, error) {
	st, err := c.Status(ctx, workflow)
	if err != nil || len(st.Drift) == 0 || st.Paused != "" || st.Stage == StageOff {
		return st.Drift, false, err
	}
	sys := audit.Actor{Name: "rollout-controller", Kind: audit.KindSystem}
	_, err = c.pause(ctx, sys, workflow, "drift_pause", "pin drift: "+strings.Join(st.Drift, "; "), map[string]any{"drift": st.Drift})
	return st.Drift, err == nil, err
}

// move records one move: the new state, the history row and the audit entry, in one
// transaction. paused is the pause reason to set ("" clears it).
func (c *Controller) move(ctx context.Context, actor audit.Actor, from Status, action string, stage Stage, step, pct int, reason, paused string, detail any) error {
	d, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, c.cfg.Pool, func(tx pgx.Tx) error {
		// Serialise moves of one workflow: the state read before is checked under the lock.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('rollout:' || $1, 0))`, from.Workflow); err != nil {
			return err
		}
		var cur *string
		var curStep int
		var curPaused string
		err := tx.QueryRow(ctx, `SELECT stage, step, promotion_paused_reason FROM workflow_rollouts WHERE workflow = $1`, from.Workflow).Scan(&cur, &curStep, &curPaused)
		if err == nil && cur != nil && (Stage(*cur) != from.Stage || curStep != from.Step) {
			return &Refusal{Action: action, Reasons: []string{fmt.Sprintf("the rollout moved meanwhile to %s step %d", *cur, curStep)}}
		}
		if err == nil && (curPaused == "") != (from.Paused == "") {
			return &Refusal{Action: action, Reasons: []string{"the rollout was paused or resumed meanwhile"}}
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		changed := stage != from.Stage || step != from.Step
		_, err = tx.Exec(ctx, `
			INSERT INTO workflow_rollouts (workflow, stage, canary_percent, step, step_since, promotion_paused_reason, promotion_paused_at, updated_at, updated_by)
			VALUES ($1, $2, $3, $4, now(), $5, CASE WHEN $5 = '' THEN NULL ELSE now() END, now(), $6)
			ON CONFLICT (workflow) DO UPDATE SET stage = EXCLUDED.stage, canary_percent = EXCLUDED.canary_percent, step = EXCLUDED.step,
			    step_since = CASE WHEN $7 OR $5 = '' THEN now() ELSE workflow_rollouts.step_since END,
			    promotion_paused_reason = EXCLUDED.promotion_paused_reason, promotion_paused_at = EXCLUDED.promotion_paused_at,
			    updated_at = now(), updated_by = EXCLUDED.updated_by`,
			from.Workflow, string(stage), pct, step, paused, actor.Name, changed)
		if err != nil {
			return fmt.Errorf("%s %s: %w", action, from.Workflow, err)
		}
		if c.cfg.Canary != nil && (changed || pct != from.Percent) {
			if err := c.cfg.Canary.PutCanaryTx(ctx, tx, actor, from.Workflow, flagPercent(stage, pct), "rollout "+action+": "+reason); err != nil {
				return fmt.Errorf("%s %s: canary flag: %w", action, from.Workflow, err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO rollout_moves (workflow, action, from_stage, from_step, to_stage, to_step, to_percent, actor, reason, detail)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, from.Workflow, action, string(from.Stage), from.Step, string(stage), step, pct, actor.Name, reason, d); err != nil {
			return fmt.Errorf("%s %s: %w", action, from.Workflow, err)
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: actor, Action: "rollout." + action, Target: "workflow:" + from.Workflow,
			Before: map[string]any{"stage": from.Stage, "step": from.Step, "percent": from.Percent, "paused": from.Paused},
			After:  map[string]any{"stage": stage, "step": step, "percent": pct, "paused": paused}, Reason: reason})
	})
}

// History lists the workflow's moves, newest first.
func (c *Controller) History(ctx context.Context, workflow string, limit int) ([]Move, error) {
	rows, err := c.cfg.Pool.Query(ctx, `SELECT id, action, from_stage, from_step, to_stage, to_step, to_percent, actor, reason, detail, at
		FROM rollout_moves WHERE workflow = $1 ORDER BY id DESC LIMIT $2`, workflow, limit)
	if err != nil {
		return nil, fmt.Errorf("rollout history of %s: %w", workflow, err)
	}
	defer rows.Close()
	out := []Move{}
	for rows.Next() {
		var m Move
		if err := rows.Scan(&m.ID, &m.Action, &m.FromStage, &m.FromStep, &m.ToStage, &m.ToStep, &m.ToPercent, &m.Actor, &m.Reason, &m.Detail, &m.At); err != nil {
			return nil, fmt.Errorf("rollout history of %s: %w", workflow, err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

func needReason(reason string) error {
	if strings.TrimSpace(reason) == "" {
		return errors.New("a reason is required")
	}
	if len(reason) > 1000 {
		return errors.New("the reason is longer than 1000 characters")
	}
	return nil
}

// Pool is the controller's database pool.
func (c *Controller) Pool() *pgxpool.Pool { return c.cfg.Pool }

// Run checks every workflow's pins and, in the canary stage, its analysis every period until
// ctx ends; a drift or a crossed threshold pauses the rollout by itself. Errors go to logf.
func (c *Controller) Run(ctx context.Context, every time.Duration, logf func(msg string, args ...any)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for _, w := range c.cfg.Policy.Workflows {
			if _, _, err := c.CheckDrift(ctx, w.Name); err != nil && !errors.Is(err, ErrRefused) && ctx.Err() == nil {
				logf("rollout drift check failed", "workflow", w.Name, "err", err)
			}
			if _, _, err := c.Watch(ctx, w.Name); err != nil && !errors.Is(err, ErrRefused) && ctx.Err() == nil {
				logf("rollout analysis failed", "workflow", w.Name, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
