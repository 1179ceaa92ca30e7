package gates

import (
	"context"
	"fmt"
	"strings"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/reconcile"
)

// TargetFor builds a workflow's gate target from the policy: its gate server (marked
// gate_target or not), the two identities' tokens, the four calls, the tool's effect and the
// workflow's outcome verifier. builtinURL is the in-process demo receiver's base URL ("" when
// none runs). A workflow without a gate section is tested on its own server with no calls
// configured, so the cases that need them end inconclusive with that reason.
func TargetFor(pol *config.Config, workflow string, getenv func(string) string, builtinURL string) (Target, error) {
	wf, ok := pol.Workflow(workflow)
	if !ok {
		return Target{}, fmt.Errorf("gate target: unknown workflow %q", workflow)
	}
	serverName := wf.Server
	if wf.Gate != nil && wf.Gate.Server != "" {
		serverName = wf.Gate.Server
	}
	t, err := ServerTarget(pol, serverName, getenv, builtinURL)
	if err != nil {
		return Target{}, err
	}
	t.Workflow = wf.Name
	t.Pins = wf.Plan().Pins.Map() // the rollout's pins are bound into the verdict
	t.Effectful = wf.Effect != "read_only"
	t.IdempotencyArgument = wf.IdempotencyArgument
	t.Concurrency = min(max(wf.Concurrency, 1), 8)
	if wf.Concurrency == 0 {
		t.Concurrency = 4
	}
	if g := wf.Gate; g != nil {
		if g.Token != nil {
			if t.Token, err = g.Token.Resolve(getenv); err != nil {
				return Target{}, fmt.Errorf("gate token of %s: %w", wf.Name, err)
			}
		}
		if g.SecondToken != nil {
			if t.SecondToken, err = g.SecondToken.Resolve(getenv); err != nil {
				return Target{}, fmt.Errorf("gate second token of %s: %w", wf.Name, err)
			}
		}
		conv := func(c *config.GateCall) *ToolCase {
			if c == nil {
				return nil
			}
			return &ToolCase{Tool: c.Tool, Arguments: c.Arguments}
		}
		t.Quick, t.Slow, t.Input, t.Fail = conv(g.Quick), conv(g.Slow), conv(g.Input), conv(g.Fail)
	}
	if t.Quick == nil && wf.Tool != "" {
		t.Quick = &ToolCase{Tool: wf.Tool}
	}
	if wf.Verifier.Kind != reconcile.KindNone && wf.Verifier.Kind != "" {
		lookup := reconcile.Lookup{BuiltinURL: builtinURL, Getenv: getenv}
		w := *wf
		t.Verify = func(ctx context.Context, key string) (int, error) {
			a, err := lookup.Verify(ctx, reconcile.Subject{OperationID: key, Workflow: &w}, w.Budgets.Reconcile)
			if err != nil {
				return 0, err
			}
			switch a.Outcome {
			case reconcile.OutcomeApplied:
				return 1, nil
			case reconcile.OutcomeNotApplied:
				return 0, nil
			}
			return 0, fmt.Errorf("the verifier could not tell: %s", a.Detail)
		}
	}
	return t, nil
}

// ServerTarget builds an ad-hoc target for a policy server (by name) or a URL. A URL is a
// gate target only when a policy server with that URL is marked gate_target.
func ServerTarget(pol *config.Config, nameOrURL string, getenv func(string) string, builtinURL string) (Target, error) {
	if strings.HasPrefix(nameOrURL, "http://") || strings.HasPrefix(nameOrURL, "https://") {
		t := Target{Name: nameOrURL, URL: nameOrURL}
		if pol != nil {
			for _, s := range pol.Servers {
				if s.URL == nameOrURL && s.GateTarget {
					t.GateTarget = true
				}
			}
		}
		return t, nil
	}
	if pol == nil {
		return Target{}, fmt.Errorf("gate target: %q is not an http(s) URL and no policy names servers", nameOrURL)
	}
	s, ok := pol.Server(nameOrURL)
	if !ok {
		return Target{}, fmt.Errorf("gate target: unknown server %q", nameOrURL)
	}
	url := s.URL
	switch {
	case url == reconcile.Builtin:
		if builtinURL == "" {
			return Target{}, fmt.Errorf("gate target %s: builtin:demo but no demo receiver runs", s.Name)
		}
		url = strings.TrimRight(builtinURL, "/") + "/mcp"
	case strings.HasPrefix(url, "stdio:"):
		return Target{}, fmt.Errorf("gate target %s: the fault proxy needs Streamable HTTP; stdio servers cannot be gated", s.Name)
	}
	t := Target{Name: s.Name, URL: url, GateTarget: s.GateTarget}
	era, err := mcpclient.ParseEraChoice(s.Era)
	if err != nil {
		return Target{}, err
	}
	t.Era = era
	if s.Token != nil {
		if t.Token, err = s.Token.Resolve(getenv); err != nil {
			return Target{}, fmt.Errorf("token of %s: %w", s.Name, err)
		}
	}
	return t, nil
}
