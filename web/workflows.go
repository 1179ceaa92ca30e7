package web

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/rollout"
)

// WorkflowsView is the workflows page's model: each workflow's policy and the route an
// operation for the chosen tenant takes right now, with why.
type WorkflowsView struct {
	Page Page
	// Tenant is the tenant decisions are shown for; Tenants are those the principal may choose.
	Tenant  string
	Tenants []string
	Rows    []WorkflowDecisionRow
	// RouterMissing is true when no router is wired (decisions are not shown).
	RouterMissing bool
}

// WorkflowDecisionRow is one workflow with its current decision.
type WorkflowDecisionRow struct {
	Name, Description, Server, Tool      string
	Effect, TaskUse, Fallback            string
	Concurrency, Backpressure, MaxTTL    string
	Owners                               string
	Stage                                string
	StageFromPolicy                      bool
	PromotionPaused                      string
	Route, Reason, ReasonWords, Sentence string
	DeclareExtension                     bool
	Shadow                               string
	Bucket                               int
	ManifestState, ToolMode              string
	Fingerprint                          string
	KillSwitch                           string
	Err                                  string
	// Gauge is the drain gauge of the workflow's kill switch (nil without flags).
	Gauge        *killswitch.Drain
	GaugeEngaged bool
}

func routeTone(r string) string {
	switch rollout.Route(r) {
	case rollout.RouteTask:
		return "ok"
	case rollout.RouteReject:
		return "bad"
	case rollout.RouteHandoff:
		return "warn"
	}
	return "info"
}

// handleWorkflows shows every workflow's policy and its decision for ?tenant= (default: the
// first tenant the principal may see).
func (s *Server) handleWorkflows(w http.ResponseWriter, r *http.Request) {
	v := WorkflowsView{Page: s.page("Workflows", "workflows"), Tenants: s.knownTenants(r), RouterMissing: s.deps.Router == nil}
	v.Tenant = r.URL.Query().Get("tenant")
	if v.Tenant == "" && len(v.Tenants) > 0 {
		v.Tenant = v.Tenants[0]
	}
	if v.Tenant != "" && !slices.Contains(v.Tenants, v.Tenant) {
		if !s.allowTenant(w, r, v.Tenant) {
			return
		}
	}
	if s.deps.Policy != nil {
		for _, wf := range s.deps.Policy.Workflows {
			row := policyRow(wf)
			row.Gauge, row.GaugeEngaged = s.switchDrain(r, killswitch.ScopeWorkflow, wf.Name)
			if s.deps.Router != nil && v.Tenant != "" {
				rt, err := s.deps.Router.Route(r.Context(), wf.Name, v.Tenant)
				if err != nil {
					s.deps.Logger.ErrorContext(r.Context(), "route decision", "workflow", wf.Name, "err", err, "request_id", requestID(r.Context()))
					row.Err = "The decision could not be made (request " + requestID(r.Context()) + ")."
				} else {
					fillDecision(&row, rt)
				}
			}
			v.Rows = append(v.Rows, row)
		}
	}
	s.render(w, r, http.StatusOK, workflowsPage(v))
}

func policyRow(wf config.Workflow) WorkflowDecisionRow {
	fb := enumWords(wf.Fallback.Kind)
	if wf.Fallback.Kind == config.FallbackSync {
		fb += " ≤ " + humanDur(wf.Fallback.MaxDuration.Duration)
	}
	maxTTL := "none"
	if wf.MaxTTL.Duration > 0 {
		maxTTL = humanDur(wf.MaxTTL.Duration)
	}
	conc := "no cap"
	if wf.Concurrency > 0 {
		conc = strconv.Itoa(wf.Concurrency) + " Tasks, then " + wf.Backpressure
	}
	return WorkflowDecisionRow{Name: wf.Name, Description: wf.Description, Server: wf.Server, Tool: wf.Tool,
		Effect: wf.Effect, TaskUse: wf.TaskUse, Fallback: fb, Concurrency: conc, MaxTTL: maxTTL,
		Owners: joinComma(wf.Owners), Stage: wf.Stage, StageFromPolicy: true}
}

func fillDecision(row *WorkflowDecisionRow, rt rollout.Routed) {
	d, in := rt.Decision, rt.Input
	row.Stage = string(in.Stage)
	if in.Stage == rollout.StageCanary {
		row.Stage += " " + strconv.Itoa(in.CanaryPercent) + "%"
	}
	row.StageFromPolicy, row.PromotionPaused = rt.StageFromPolicy, rt.PromotionPausedReason
	row.Route, row.Reason, row.ReasonWords, row.Sentence = string(d.Route), string(d.Reason), rollout.Reasons[d.Reason], d.Sentence
	row.DeclareExtension, row.Bucket = d.DeclareExtension, in.Bucket
	if d.Shadow.Applies {
		row.Shadow = "incumbent executes; projected states compared"
		if d.Shadow.CompareAsTask {
			row.Shadow = "incumbent executes; read-only Task runs beside it to compare"
		}
	}
	row.ManifestState, row.Fingerprint = string(in.ManifestState), manifests.Short(d.Fingerprint)
	row.ToolMode = manifests.ModeLabel(rt.ToolMode)
	if rt.ToolMode == "" {
		row.ToolMode = "not listed"
	}
	switch {
	case in.KillSwitchUnknown:
		row.KillSwitch = "unreadable: blocked"
	case in.KillSwitch:
		row.KillSwitch = "engaged"
	default:
		row.KillSwitch = "released"
	}
}
