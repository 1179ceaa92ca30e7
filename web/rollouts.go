package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/rollout"
)

// RolloutRow is one workflow on the Rollouts page.
type RolloutRow struct {
	Status   rollout.Status
	Analysis rollout.Analysis
	// Drain is the latest rollback's progress (zero Since: never rolled back).
	Drain rollout.Drain
	// Shadow is the latest shadow comparisons (newest first); Diverged counts those with a
	// divergence.
	Shadow   []rollout.Comparison
	Diverged int
	// Charts draw the canary beside the incumbent per interval of the analysis window.
	Charts []RolloutChart
}

// RolloutConfirm is the confirmation of a move: what will change and for how many tenants.
type RolloutConfirm struct {
	Workflow, Action, Reason, Change string
}

// RolloutsView is the Rollouts page.
type RolloutsView struct {
	Page
	Flash, FlashTone string
	Rows             []RolloutRow
	CanChange        bool
	Confirm          *RolloutConfirm
	Refused          []string
}

var rolloutActions = map[string]bool{"promote": true, "pause": true, "resume": true, "rollback": true}

// handleRollouts shows every workflow's stage and step, gate evidence, pins and drift, the
// canary beside the incumbent and the history, with the moves an operator may make.
func (s *Server) handleRollouts(w http.ResponseWriter, r *http.Request) {
	s.renderRollouts(w, r, http.StatusOK, "", "", nil, nil)
}

func (s *Server) renderRollouts(w http.ResponseWriter, r *http.Request, status int, flash, tone string, confirm *RolloutConfirm, refused []string) {
	if s.deps.Rollouts == nil || s.deps.Policy == nil {
		s.handleNotFound(w, r)
		return
	}
	var rows []RolloutRow
	for _, wf := range s.deps.Policy.Workflows {
		st, err := s.deps.Rollouts.Status(r.Context(), wf.Name)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		a, err := s.deps.Rollouts.Analyze(r.Context(), wf.Name)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		d, err := s.deps.Rollouts.Drain(r.Context(), wf.Name)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		if len(st.History) > 10 {
			st.History = st.History[:10]
		}
		cs, err := s.deps.Rollouts.Comparisons(r.Context(), wf.Name, 10)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		sr, err := s.deps.Rollouts.Series(r.Context(), wf.Name, 12)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		row := RolloutRow{Status: st, Analysis: a, Drain: d, Shadow: cs, Charts: rolloutCharts(sr)}
		for _, c := range cs {
			if len(c.Divergences) > 0 || c.Error != "" {
				row.Diverged++
			}
		}
		rows = append(rows, row)
	}
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"message": flash, "tone": tone, "rollouts": rows, "confirm": confirm, "refused": refused})
		return
	}
	v := RolloutsView{Page: s.page("Rollouts", "rollouts"), Flash: flash, FlashTone: tone, Rows: rows,
		CanChange: principal(r).Can(auth.RoleOperator), Confirm: confirm, Refused: refused}
	s.render(w, r, status, rolloutsPage(v))
}

// handleRolloutMove makes one move (promote, pause, resume, rollback) after a confirmation that
// says what will change and for how many tenants.
func (s *Server) handleRolloutMove(w http.ResponseWriter, r *http.Request) {
	if s.deps.Rollouts == nil || s.deps.Policy == nil {
		s.handleNotFound(w, r)
		return
	}
	name, action := chi.URLParam(r, "workflow"), chi.URLParam(r, "action")
	wf, ok := s.deps.Policy.Workflow(name)
	if !ok || !rolloutActions[action] {
		s.handleNotFound(w, r)
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" || len(reason) > 1000 {
		s.renderRollouts(w, r, http.StatusBadRequest, "Say why (a reason of at most 1000 characters is required).", "bad", nil, nil)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		st, err := s.deps.Rollouts.Status(r.Context(), wf.Name)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		s.renderRollouts(w, r, http.StatusOK, "", "", &RolloutConfirm{Workflow: wf.Name, Action: action, Reason: reason,
			Change: s.moveChange(st, action)}, nil)
		return
	}
	var err error
	by := s.actor(r)
	switch action {
	case "promote":
		_, err = s.deps.Rollouts.Promote(r.Context(), by, wf.Name, reason)
	case "pause":
		_, err = s.deps.Rollouts.Pause(r.Context(), by, wf.Name, reason)
	case "resume":
		_, err = s.deps.Rollouts.Resume(r.Context(), by, wf.Name, reason)
	case "rollback":
		_, err = s.deps.Rollouts.Rollback(r.Context(), by, wf.Name, reason)
	}
	var ref *rollout.Refusal
	if errors.As(err, &ref) {
		s.renderRollouts(w, r, http.StatusConflict, fmt.Sprintf("The %s of %s was refused.", action, wf.Name), "bad", nil, ref.Reasons)
		return
	}
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	s.renderRollouts(w, r, http.StatusOK, fmt.Sprintf("%s of %s done.", titleWord(action), wf.Name), "ok", nil, nil)
}

func titleWord(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// moveChange says in words what a move changes and for how many of the policy's tenants.
func (s *Server) moveChange(st rollout.Status, action string) string {
	inside := func(stage rollout.Stage, pct int) int {
		n := 0
		for _, t := range s.deps.Policy.Tenants {
			if stage == rollout.StageFull || (stage == rollout.StageCanary && rollout.Bucket(st.Workflow, t) < pct) {
				n++
			}
		}
		return n
	}
	total := len(s.deps.Policy.Tenants)
	now := inside(st.Stage, st.Percent)
	switch action {
	case "promote":
		if st.Next == "" {
			return "Already at full: nothing to promote."
		}
		return fmt.Sprintf("%s moves from %s to %s: %d of %d tenants on the Task route (now %d).",
			st.Workflow, stageText(st.Stage, st.Percent), stageText(st.Next, st.NextPercent), inside(st.Next, st.NextPercent), total, now)
	case "pause":
		return fmt.Sprintf("Promotion of %s stops at %s; the %d of %d tenants on the Task route stay there.", st.Workflow, stageText(st.Stage, st.Percent), now, total)
	case "resume":
		return fmt.Sprintf("The pause of %s is cleared and the hold time starts again.", st.Workflow)
	}
	return fmt.Sprintf("The kill switch of %s is engaged and the stage goes back to off: %d of %d tenants return to the incumbent route; running Tasks are watched until drained.",
		st.Workflow, now, total)
}

func stageText(stage rollout.Stage, pct int) string {
	if stage == rollout.StageCanary {
		return fmt.Sprintf("canary %d%%", pct)
	}
	return string(stage)
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// shortID is the first block of an operation id, for a link whose title is the whole id.
func shortID(id string) string {
	if i := strings.IndexByte(id, '-'); i > 0 {
		return id[:i]
	}
	return id
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// ChartDot is one measured interval of one side on a chart.
type ChartDot struct {
	// I is the interval's index in the series; X and Y place it in the SVG.
	I    int
	X, Y string
	// Value is the rate (0-1) drawn; Count and Ops are the figures it is made of.
	Value      float64
	Count, Ops int
	Label      string
}

// ChartLine is one side's line on a chart.
type ChartLine struct {
	Side, Class string
	Points      string
	Dots        []ChartDot
}

// RolloutChart is a small server-rendered SVG of one rate, the canary beside the incumbent.
type RolloutChart struct {
	Metric, Title string
	W, H          int
	Lines         []ChartLine
	// From and To label the time axis.
	From, To string
}

const rchartW, rchartH, rchartPad = 240, 64, 6

// rolloutCharts draws the failure and unknown-outcome rates of each interval of sr, for the
// canary and the incumbent; an interval without operations on a side has no dot on that side.
func rolloutCharts(sr rollout.Series) []RolloutChart {
	n := len(sr.Points)
	if n == 0 {
		return nil
	}
	type metric struct {
		key, title string
		value      func(rollout.Side) (float64, int)
	}
	metrics := []metric{
		{"failure", "Failure rate", func(s rollout.Side) (float64, int) { return s.FailureRate, s.Failed }},
		{"unknown", "Unknown-outcome rate", func(s rollout.Side) (float64, int) { return s.UnknownRate, s.Unknown }},
	}
	var out []RolloutChart
	for _, m := range metrics {
		c := RolloutChart{Metric: m.key, Title: m.title, W: rchartW, H: rchartH,
			From: sr.Since.UTC().Format("15:04"), To: sr.Since.Add(time.Duration(n) * sr.Width).UTC().Format("15:04")}
		for _, side := range []string{"canary", "incumbent"} {
			l := ChartLine{Side: side, Class: "chart-" + side}
			var pts []string
			for i, p := range sr.Points {
				s := p.Incumbent
				if side == "canary" {
					s = p.Canary
				}
				if s.Operations == 0 {
					continue
				}
				v, count := m.value(s)
				x := float64(rchartPad)
				if n > 1 {
					x += float64(i) * float64(rchartW-2*rchartPad) / float64(n-1)
				}
				y := float64(rchartH-rchartPad) - v*float64(rchartH-2*rchartPad)
				d := ChartDot{I: i, X: strconv.FormatFloat(x, 'f', 1, 64), Y: strconv.FormatFloat(y, 'f', 1, 64), Value: v, Count: count, Ops: s.Operations,
					Label: fmt.Sprintf("%s from %s: %s %s (%d of %d)", side, p.Start.UTC().Format("15:04:05"), strings.ToLower(m.title), pct(v), count, s.Operations)}
				l.Dots = append(l.Dots, d)
				pts = append(pts, d.X+","+d.Y)
			}
			l.Points = strings.Join(pts, " ")
			c.Lines = append(c.Lines, l)
		}
		out = append(out, c)
	}
	return out
}
