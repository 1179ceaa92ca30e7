package web

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/rollout"
)

// Helpers that put operations in words for the overview, the operations list and the
// operation detail: states as colour and text, human units, attention groups.

// Attention groups, in the order pages show them (CONSOLE.md rule 8).
const (
	groupPerson  = iota // input required, reconciliation, handoff
	groupRunning        // creating, working
	groupTrouble        // failed, cancelled, lost or unknown
	groupDone           // finished and not in doubt
)

// groupNames name the attention groups.
var groupNames = [...]string{"Needs a person", "Running", "Failed, cancelled or unknown", "Done"}

// attentionGroup files an operation under one attention group. Cancelled and failed are never
// filed under done.
func attentionGroup(op operations.Operation) int {
	st := taskState(op)
	switch {
	case op.NeedsPerson || st == operations.StateInputRequired:
		return groupPerson
	case st == operations.StateCreating || st == operations.StateWorking:
		return groupRunning
	case op.DomainOutcome == operations.OutcomeUnknown, st.Final() && st != operations.StateCompleted, op.Route == operations.RouteReject,
		op.Task != nil && op.Task.ToolError, op.Mismatch():
		return groupTrouble
	}
	return groupDone
}

func taskState(op operations.Operation) operations.TaskState {
	if op.Task == nil {
		return ""
	}
	return op.Task.State
}

// stateWords names a task state for people; a completed task whose result is a tool error says
// so.
func stateWords(st operations.TaskState, toolError bool) string {
	switch st {
	case "":
		return "no task"
	case operations.StateCompleted:
		if toolError {
			return "completed — tool error"
		}
		return "completed"
	case operations.StateInputRequired:
		return "input required"
	case operations.StateCreateUnacknowledged:
		return "create not acknowledged"
	case operations.StateUnobservable:
		return "unobservable"
	case operations.StateExpired:
		return "expired on the server"
	}
	return strings.ReplaceAll(string(st), "_", " ")
}

// stateTone colours a task state.
func stateTone(st operations.TaskState, toolError bool) string {
	switch st {
	case operations.StateCompleted:
		if toolError {
			return "bad"
		}
		return "ok"
	case operations.StateWorking:
		return "info"
	case operations.StateInputRequired, operations.StateCancelled:
		return "warn"
	case operations.StateFailed, operations.StateCreateUnacknowledged, operations.StateUnobservable, operations.StateExpired:
		return "bad"
	}
	return "idle"
}

// outcomeWords names a domain outcome for people.
func outcomeWords(o operations.Outcome) string {
	switch o {
	case operations.OutcomeNotApplied:
		return "not applied"
	case operations.OutcomePending:
		return "pending"
	case operations.OutcomeNoEffect:
		return "no effect to verify"
	case operations.OutcomeNotRun:
		return "not run"
	case operations.OutcomeUnverified:
		return "unverified"
	case operations.OutcomeUnknown:
		return "unknown"
	}
	return strings.ReplaceAll(string(o), "_", " ")
}

// outcomeTone colours a domain outcome.
func opOutcomeTone(o operations.Outcome) string {
	switch o {
	case operations.OutcomeApplied:
		return "ok"
	case operations.OutcomeCompensated:
		return "info"
	case operations.OutcomeUnknown:
		return "bad"
	}
	return "idle"
}

// routeWords is a route with its reason code in words (CONSOLE.md rule 10).
func routeWords(op operations.Operation) string {
	if w, ok := rollout.Reasons[rollout.Reason(op.ReasonCode)]; ok {
		return w
	}
	return strings.ReplaceAll(op.ReasonCode, "_", " ")
}

// rolloutWords says which stage, step, flag and bucket sent the operation to its route (rule
// 10), "" when the row has no rollout context.
func rolloutWords(op operations.Operation) string {
	if len(op.RouteContext) == 0 {
		return ""
	}
	var c rollout.RouteContext
	if json.Unmarshal(op.RouteContext, &c) != nil {
		return ""
	}
	return c.Words()
}

// eraShort names an era in a few characters.
func eraShort(era string) string {
	switch era {
	case "2025-11-25":
		return "2025-11-25 core"
	case "2026-07-28":
		return "2026-07-28 extension"
	}
	return era
}

// human writes a duration in the units an operator reads: "250 ms", "60 s", "5 min",
// "1 h 30 min", "2 d".
func humanDur(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		if d%time.Second != 0 && d < 10*time.Second {
			return fmt.Sprintf("%.1f s", d.Seconds())
		}
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		if s := int(d.Seconds()) % 60; s != 0 {
			return fmt.Sprintf("%d min %d s", int(d.Minutes()), s)
		}
		return fmt.Sprintf("%d min", int(d.Minutes()))
	case d < 48*time.Hour:
		if m := int(d.Minutes()) % 60; m != 0 {
			return fmt.Sprintf("%d h %d min", int(d.Hours()), m)
		}
		return fmt.Sprintf("%d h", int(d.Hours()))
	}
	return fmt.Sprintf("%d d", int(d.Hours()/24))
}

// elapsed is how long the operation has run: until its task ended, or until now.
func opElapsed(op operations.Operation, now time.Time) string {
	t := op.Task
	switch {
	case t != nil && t.State == operations.StateCreateUnacknowledged:
		// The server never acknowledged the create: nobody knows whether it ran, nor for how long.
		return "fate unknown since " + absTime(op.CreatedAt)
	case t != nil && t.TerminalAt != nil:
		return "ran " + humanDur(t.TerminalAt.Sub(op.CreatedAt))
	case t != nil && t.State == operations.StateUnobservable:
		return "unobservable since " + absTime(op.UpdatedAt)
	case t != nil && t.State == operations.StateExpired:
		return "expired on the server, seen " + absTime(op.UpdatedAt)
	case t != nil:
		return "running " + humanDur(now.Sub(op.CreatedAt))
	case op.Route == operations.RouteReject || op.Route == operations.RouteHandoff || op.DomainOutcome == operations.OutcomeNotRun:
		// The work never ran here: no clock.
		return ""
	case op.DomainOutcome != operations.OutcomePending:
		return "ran " + humanDur(op.UpdatedAt.Sub(op.CreatedAt))
	}
	return "running " + humanDur(now.Sub(op.CreatedAt))
}

// expiresIn says how long the watchers still follow the task ("" when it is final or has no
// deadline).
func opExpiresIn(op operations.Operation, now time.Time) string {
	if op.Task == nil || op.Task.Deadline == nil || op.Task.State.Final() {
		return ""
	}
	left := op.Task.Deadline.Sub(now)
	if left <= 0 {
		return "deadline passed"
	}
	return "expires in " + humanDur(left.Truncate(time.Second))
}

// workTitle is the headline of a row: the business key, else the intended effect, else the
// workflow.
func workTitle(op operations.Operation) string {
	switch {
	case op.ObjectRef != "":
		return op.ObjectRef
	case op.IntendedEffect != "":
		return op.IntendedEffect
	}
	return op.Workflow
}

// toolOf is the tool (or the policy's tool when the operation took no Task).
func toolOf(op operations.Operation, pol *config.Config) (server, tool string) {
	if op.Task != nil {
		return op.Task.Server, op.Task.Tool
	}
	if pol != nil {
		if wf, ok := pol.Workflow(op.Workflow); ok {
			return wf.Server, wf.Tool
		}
	}
	return "", ""
}

// bounded caps text from an MCP server for display (templ escapes it).
// enumWords says a policy or protocol value in words: "job_api" is "job API", "read_only"
// "read only"; other values lose their underscores.
func enumWords(s string) string {
	if s == "job_api" {
		return "job API"
	}
	return strings.ReplaceAll(s, "_", " ")
}

// failureWho says whose words a failure reason is, as a list row labels it.
func failureWho(by string) string {
	switch by {
	case operations.FailedByTool:
		return "the tool said"
	case operations.FailedByJobAPI:
		return "the job API said"
	}
	return "the server said"
}

func boundText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

// routeExists reports whether the console serves GET path (e.g. a page another issue adds).
func (s *Server) routeExists(path string) bool {
	rt, ok := s.handler.(chi.Routes)
	return ok && rt.Match(chi.NewRouteContext(), "GET", path)
}
