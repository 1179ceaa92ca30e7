// Package demo generates the embedded demo's traffic: a few operations a minute started
// through the operations service (not over HTTP) against the in-process reference receiver,
// on every workflow of the policy, so that every console page shows life. Some tasks
// complete, some ask for input, some fail, and some lose their create response (the
// receiver's fault knob), which sends them to reconciliation.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/lifecycle"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
)

// Starter starts operations; *operations.Service satisfies it.
type Starter interface {
	Start(ctx context.Context, scope operations.Scope, req operations.StartRequest) (operations.StartResult, error)
}

// Config configures the traffic generator. Zero values take the documented defaults.
type Config struct {
	// Ops starts the operations (required).
	Ops Starter
	// Policy lists the workflows to exercise (required): every workflow gets traffic in turn.
	Policy *config.Config
	// Knobs are the in-process receiver's fault knobs, used to lose some create responses;
	// nil skips that scenario.
	Knobs *receiver.Knobs
	// Tenants are the demo tenants the operations belong to, in turn (default: the
	// policy's tenants, or "acme").
	Tenants []string
	// Interval is the pause between two starts (default 15s: four a minute).
	Interval time.Duration
	// WorkDuration is the typical length of a task's work (default 40s); tasks take between
	// half and one and a half times this.
	WorkDuration time.Duration
	// PassTimeout bounds one start (default 30s).
	PassTimeout time.Duration
	// Logger receives logs (default: discard).
	Logger *slog.Logger
	// AfterStart, when set, is called after each start with its result or error.
	AfterStart func(operations.StartResult, error)
}

func (c *Config) validate() error {
	if c.Ops == nil || c.Policy == nil {
		return errors.New("demo: Ops and Policy are required")
	}
	if len(c.Policy.Workflows) == 0 {
		return errors.New("demo: the policy has no workflows")
	}
	if len(c.Tenants) == 0 {
		c.Tenants = c.Policy.Tenants
	}
	if len(c.Tenants) == 0 {
		c.Tenants = []string{"acme"}
	}
	if c.Interval <= 0 {
		c.Interval = 15 * time.Second
	}
	if c.WorkDuration <= 0 {
		c.WorkDuration = 40 * time.Second
	}
	if c.PassTimeout <= 0 {
		c.PassTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// scenario is one kind of demo operation.
type scenario struct {
	name      string
	args      func(work time.Duration) map[string]any
	loseReply bool // drop the CreateTaskResult (the task exists; the create is unacknowledged)
}

// scenarios cycle per workflow. On the task route they give completed, input_required,
// failed and create_unacknowledged tasks; on the other routes the same arguments give plain
// answers, tool errors, jobs and handoffs.
var scenarios = []scenario{
	{name: "completes", args: func(w time.Duration) map[string]any { return map[string]any{"duration_ms": w.Milliseconds()} }},
	{name: "asks for input", args: func(w time.Duration) map[string]any {
		return map[string]any{"duration_ms": w.Milliseconds() / 2, "outcome": receiver.OutcomeInput, "input_message": "Approve this operation?"}
	}},
	{name: "completes", args: func(w time.Duration) map[string]any { return map[string]any{"duration_ms": w.Milliseconds() * 3 / 2} }},
	{name: "fails", args: func(w time.Duration) map[string]any {
		return map[string]any{"duration_ms": w.Milliseconds() / 2, "outcome": receiver.OutcomeToolError, "text": "declined by the system of record"}
	}},
	{name: "loses its create response", loseReply: true, args: func(w time.Duration) map[string]any { return map[string]any{"duration_ms": w.Milliseconds()} }},
}

// Traffic is the demo traffic generator, a service with Start and Stop.
type Traffic struct {
	cfg Config

	n    int // starts made (loop goroutine only)
	life lifecycle.Loop
}

// New validates cfg and returns a stopped generator.
func New(cfg Config) (*Traffic, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Logger = cfg.Logger.With("component", "demo-traffic")
	return &Traffic{cfg: cfg}, nil
}

// Start starts one operation every Interval until Stop, the first after one Interval (the
// servers have been probed by then, so the router sees their capabilities). It returns an
// error if the generator is running.
func (t *Traffic) Start(ctx context.Context) error {
	if err := t.life.Start(ctx, t.loop); err != nil {
		return fmt.Errorf("demo: traffic: %w", err)
	}
	return nil
}

// Stop ends the loop and waits for a running start. It is idempotent.
func (t *Traffic) Stop() {
	t.life.Stop()
}

func (t *Traffic) loop(ctx context.Context) {
	tm := time.NewTimer(t.cfg.Interval)
	defer tm.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tm.C:
		}
		res, err := t.runOnce(ctx)
		if err != nil && ctx.Err() == nil {
			t.cfg.Logger.Warn("demo operation not started", "err", err)
		}
		if t.cfg.AfterStart != nil {
			t.cfg.AfterStart(res, err)
		}
		tm.Reset(t.cfg.Interval)
	}
}

// runOnce starts the next operation: workflows in turn, each cycling through the scenarios.
func (t *Traffic) runOnce(ctx context.Context) (operations.StartResult, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.PassTimeout)
	defer cancel()
	n := t.n
	t.n++
	wfs := t.cfg.Policy.Workflows
	wf := wfs[n%len(wfs)]
	sc := scenarios[(n/len(wfs))%len(scenarios)]
	tenant := t.cfg.Tenants[n%len(t.cfg.Tenants)]
	work := t.cfg.WorkDuration
	if wf.TaskUse == config.TaskNever && wf.Fallback.Kind == "sync" {
		// A synchronous call must fit its max_duration: most answer in time.
		work = min(work, wf.Fallback.MaxDuration.Duration/4)
	}
	args := sc.args(work)
	if sc.loseReply && t.cfg.Knobs != nil {
		t.cfg.Knobs.SetTool(wf.Tool, receiver.Fault{DropBeforeCreateResult: true})
		defer t.cfg.Knobs.SetTool(wf.Tool, receiver.Fault{})
	}
	req := operations.StartRequest{
		IdempotencyKey: fmt.Sprintf("demo-%d-%d", time.Now().UnixNano(), n),
		Workflow:       wf.Name, Tenant: tenant, Actor: "demo:traffic",
		ObjectRef: fmt.Sprintf("%s #%d", wf.Name, 1000+n), ObjectVersion: "1",
		IntendedEffect: fmt.Sprintf("demo %s (%s)", wf.Name, sc.name),
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return operations.StartResult{}, err
	}
	req.Arguments = raw
	res, err := t.cfg.Ops.Start(ctx, operations.Scope{Tenants: []string{tenant}}, req)
	if err != nil {
		return res, fmt.Errorf("start %s (%s): %w", wf.Name, sc.name, err)
	}
	t.cfg.Logger.Info("demo operation started", "workflow", wf.Name, "scenario", sc.name, "route", res.Response.Route,
		"operation", res.Response.OperationID)
	return res, nil
}
