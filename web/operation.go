package web

import (
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// OperationView is the operation detail's model.
type OperationView struct {
	Page             Page
	Flash, FlashTone string
	Row              OpRow
	D                operations.Detail
	Effect           string
	// Task facts in human units (CONSOLE.md rule 7).
	Era, PollInterval, TTL, TimeLeft string
	TTLOverride                      bool
	// ServerState is the explicit state of the task on the server (rule 6): "expired on the
	// server at …", "unobservable since …", "gone from the server …".
	ServerState string
	// Pruned is set when the retention janitor removed the result envelope and timeline: when
	// and after which retention period, in words (CONSOLE.md rule 6: nothing vanishes silently).
	Pruned   string
	Timeline []TimelineLine
	// LastProgress is the last progress message the server sent (never the outcome).
	LastProgress   string
	LastProgressAt time.Time
	// Inputs is the input ledger; Open are the questions a person may answer now.
	Inputs []operations.PendingInput
	Open   []operations.PendingInput
	// ClosedWhy says, by question key, why a question can no longer be answered.
	ClosedWhy map[string]string
	// Unanswered says, for each question left without an answer, what it asked and why it can
	// no longer be answered (operations.InputClosedReason).
	Unanswered   []string
	CanAnswer    bool
	WhoMayAnswer string
	// Cancellation in its real steps (rule 4), shown once a cancel was requested.
	CancelSteps []CancelStep
	CanCancel   bool
	// Doing and MayHave are what the cancel confirmation says.
	Doing, MayHave []string
	// ReconLink is the reconciliation item's page, "" when the console has none.
	ReconLink string
	// Reason is why the work failed or was refused, in the server's own words (its tool error
	// text, its error message or its final status message), bounded; ReasonLabel says whose.
	Reason, ReasonLabel string
	// Advice is what the person is meant to do when the operation needs one, "" otherwise.
	Advice string
	// NeedsPersonWhy says in words why the operation needs a person (operations'
	// NeedsPersonSQL: a question, a reconciliation item, a handoff), "" when it needs none.
	NeedsPersonWhy string
}

// TimelineLine is one line of the timeline: an entry, or a run of routine observations of one
// state collapsed with a count.
type TimelineLine struct {
	At, Until     time.Time
	Source, State string
	// Who names the real source of the line in words: a poll, a notification, the create
	// call, the verifier, the server's answer to a cancel, or the person by name.
	Who              string
	Tone             string
	Message, Label   string
	Count            int
	Operator, Notice bool
}

// CancelStep is one step of a cancellation.
type CancelStep struct {
	Name, Text string
	At         *time.Time
	Done       bool
	Tone       string
}

// timelineMessageMax bounds a message from a server on the page.
const timelineMessageMax = 300

func (s *Server) operationView(r *http.Request, d operations.Detail, flash, tone string) OperationView {
	now := s.deps.Now()
	v := OperationView{Page: s.page(workTitle(d.Operation), "operations"), Flash: flash, FlashTone: tone, D: d, Row: s.opRow(d.Operation, now)}
	v.Page.Title = v.Row.Tool + " · " + workTitle(d.Operation)
	var wf *config.Workflow
	if s.deps.Policy != nil {
		wf, _ = s.deps.Policy.Workflow(d.Workflow)
	}
	if wf != nil {
		v.Effect = wf.Effect
	}
	t := d.Task
	if t != nil {
		v.Era = eraLabel(t.Era)
		if v.Era == "" {
			v.Era = "not known yet"
		}
		switch {
		case t.PollInterval > 0:
			v.PollInterval = humanDur(t.PollInterval) + " (the server's pollInterval)"
		default:
			v.PollInterval = "none suggested: Taskgate's default"
		}
		v.TTL, v.TTLOverride = ttlWords(t, wf)
		if t.Deadline != nil && !t.State.Final() {
			if left := t.Deadline.Sub(now); left > 0 {
				v.TimeLeft = humanDur(left.Truncate(time.Second)) + " left"
			} else {
				v.TimeLeft = "deadline passed"
			}
		}
		v.ServerState = serverState(d, now)
		if wf != nil && d.Envelope == nil && t.TerminalAt != nil && t.ResultState != "pending" {
			if keep := wf.StatusRetention.Duration; keep > 0 && now.After(t.TerminalAt.Add(keep)) {
				v.Pruned = "pruned after the retention period (" + humanDur(keep) + ", since " + absTime(t.TerminalAt.Add(keep)) + ")"
				v.ServerState = strings.NewReplacer("result kept: no", "result kept: no, "+v.Pruned,
					"result kept here: no", "result kept here: no, "+v.Pruned).Replace(v.ServerState)
			}
		}
	}
	v.Timeline, v.LastProgress, v.LastProgressAt = timelineLines(d)
	v.Reason, v.ReasonLabel = failureReason(d.Operation)
	switch {
	case d.Reconciliation != nil && d.Reconciliation.ClosedAt == nil:
		v.Advice = adviceFor(d.Reconciliation.Reason, operations.AttentionReconcile)
	case d.Attention != "":
		v.Advice = adviceFor(d.AttentionReason, d.Attention)
	}
	v.NeedsPersonWhy = needsPersonWhy(d)
	v.Inputs = d.Inputs
	v.ClosedWhy = map[string]string{}
	for _, in := range d.Inputs {
		if t != nil {
			v.ClosedWhy[in.Key] = operations.InputClosedReason(in, t.State, now)
		}
		// Loud: every question left without an answer, whatever closed it (the task moved on,
		// expired or became unobservable, or its deadline passed).
		if why := v.ClosedWhy[in.Key]; why != "" && in.AnsweredAt == nil {
			v.Unanswered = append(v.Unanswered, "“"+boundText(in.Message, 80)+"”: "+why)
		}
		if in.State == "open" && t != nil && t.State == operations.StateInputRequired && (in.ExpiresAt == nil || in.ExpiresAt.After(now)) {
			v.Open = append(v.Open, in)
		}
	}
	p := principal(r)
	v.CanAnswer = canAnswer(p)
	v.WhoMayAnswer = "operators and support staff whose scope includes " + d.Tenant
	v.CancelSteps = cancelSteps(d)
	v.CanCancel = p.Can(auth.RoleOperator) && t != nil && t.TaskID != "" && t.State.Watchable()
	if v.CanCancel {
		v.Doing, v.MayHave = cancelWords(d, wf, v.LastProgress, now)
	}
	if d.Reconciliation != nil {
		link := itemHref(d.Reconciliation.ID)
		if s.routeExists(link) {
			v.ReconLink = link
		}
	}
	return v
}

// ttlWords says "TTL requested 30 min → granted 5 min" and whether the server overrode it.
func ttlWords(t *operations.Task, wf *config.Workflow) (string, bool) {
	req, got := "none requested", "not granted yet"
	if t.RequestedTTL != nil {
		req = "requested " + humanDur(*t.RequestedTTL)
	}
	if t.TTL != nil {
		got = "granted " + humanDur(*t.TTL)
	} else if t.TaskID != "" {
		got = "granted: unlimited (the server set none)"
	}
	out := "TTL " + req + " → " + got
	if wf != nil && wf.MaxTTL.Duration > 0 {
		out += "; watched at most " + humanDur(wf.MaxTTL.Duration) + " (policy)"
	}
	override := t.RequestedTTL != nil && t.TTL != nil && *t.RequestedTTL != *t.TTL
	return out, override
}

// serverState is the explicit state of a task on its server (CONSOLE.md rule 6).
func serverState(d operations.Detail, now time.Time) string {
	t := d.Task
	kept := "no"
	if d.Envelope != nil {
		kept = "yes"
	}
	at := func(p *time.Time) string {
		if p == nil {
			return "an unknown time"
		}
		return absTime(*p)
	}
	switch t.State {
	case operations.StateCreating:
		return "creation sent; no answer read yet"
	case operations.StateCreateUnacknowledged:
		return "never acknowledged: the creation's answer was lost, and the call is not resent"
	case operations.StateExpired:
		return "expired on the server at " + at(t.TerminalAt) + " (result kept: " + kept + ")"
	case operations.StateUnobservable:
		why := ""
		if t.FailureKind != "" {
			why = " (" + strings.ReplaceAll(t.FailureKind, "_", " ") + ")"
		}
		return "unobservable since " + at(t.TerminalAt) + why + " (result kept: " + kept + ")"
	}
	if !t.State.Final() {
		return "watched: next poll " + relOrDash(t.NextPollAt, now)
	}
	if t.ServerCreatedAt != nil && t.TTL != nil {
		gone := t.ServerCreatedAt.Add(*t.TTL)
		if now.After(gone) {
			return "gone from the server since " + absTime(gone) + " (its TTL ran out; result kept: " + kept + ")"
		}
		return "the server keeps it until " + absTime(gone) + " (result kept here: " + kept + ")"
	}
	return "finished on the server (result kept: " + kept + ")"
}

func relOrDash(t *time.Time, now time.Time) string {
	if t == nil {
		return "—"
	}
	return relTime(*t, now)
}

// routine reports a timeline entry that repeats what the watchers see (polls, notifications).
func routine(e operations.TimelineEntry) bool {
	return e.Source == operations.SourcePoll || e.Source == operations.SourceNotification
}

// timelineLines collapses runs of routine observations of one state into one line with a
// count, and finds the last progress message (a message seen while the task was running).
func timelineLines(d operations.Detail) ([]TimelineLine, string, time.Time) {
	var out []TimelineLine
	var progress string
	var progressAt time.Time
	for _, e := range d.Timeline {
		msg := boundText(e.Message, timelineMessageMax)
		st := operations.TaskState(e.State)
		if (st == operations.StateWorking || st == operations.StateInputRequired) && msg != "" {
			progress, progressAt = msg, e.At
		}
		if n := len(out); n > 0 && routine(e) && out[n-1].Source == e.Source && out[n-1].State == e.State {
			out[n-1].Count++
			out[n-1].Until = e.At
			if msg != "" {
				out[n-1].Message = msg
			}
			continue
		}
		line := TimelineLine{At: e.At, Until: e.At, Source: e.Source, State: e.State, Message: msg, Count: 1, Who: timelineWho(e),
			Operator: e.Source == operations.SourceOperator, Tone: timelineTone(e.State)}
		line.Notice = strings.HasPrefix(e.State, "cancel") || strings.HasPrefix(e.State, "input")
		out = append(out, line)
	}
	// Label the last progress message where it appears, never as the outcome.
	if progress != "" {
		for i := len(out) - 1; i >= 0; i-- {
			st := operations.TaskState(out[i].State)
			if (st == operations.StateWorking || st == operations.StateInputRequired) && out[i].Message == progress {
				out[i].Label = "last progress message"
				break
			}
		}
	}
	return out, progress, progressAt
}

// quietPolls counts the polls that saw no change: counted by the watcher, never written to the
// timeline, shown there as one collapsed line (CONSOLE.md rule 3).
func (v OperationView) quietPolls() int {
	if v.D.Task == nil {
		return 0
	}
	n := v.D.Task.Polls
	for _, l := range v.Timeline {
		if l.Source == operations.SourcePoll {
			n -= l.Count
		}
	}
	return max(n, 0)
}

func timelineTone(state string) string {
	switch {
	case strings.HasPrefix(state, "cancel"), strings.HasPrefix(state, "input"):
		return "warn"
	case state == "result_unavailable", state == "unanswered", state == "answer_refused":
		return "bad"
	}
	return stateTone(operations.TaskState(state), false)
}

// cancelSteps shows a cancellation in its real steps: requested → acknowledged → terminal seen
// → any late effect. Nothing is marked done before it was observed.
func cancelSteps(d operations.Detail) []CancelStep {
	t := d.Task
	if t == nil || t.CancelRequested == nil {
		return nil
	}
	reqText := "by " + t.CancelBy
	var refused string
	for _, e := range d.Timeline {
		switch e.State {
		case "cancel_requested":
			reqText = boundText(e.Message, timelineMessageMax)
		case "cancel_refused", "cancel_unanswered":
			refused = boundText(e.Message, timelineMessageMax)
		}
	}
	steps := []CancelStep{{Name: "Requested", Text: reqText, At: t.CancelRequested, Done: true, Tone: "warn"}}
	ack := CancelStep{Name: "Acknowledged by the server", At: t.CancelAcked, Done: t.CancelAcked != nil}
	switch {
	case ack.Done:
		ack.Text, ack.Tone = "the server accepted the cancel request", "ok"
	case refused != "":
		ack.Text, ack.Tone = refused, "bad"
	default:
		ack.Text, ack.Tone = "not observed yet", "idle"
	}
	steps = append(steps, ack)
	term := CancelStep{Name: "Terminal state seen", At: t.TerminalAt, Done: t.State.Final()}
	switch {
	case t.State == operations.StateCancelled:
		term.Text, term.Tone = "the task is cancelled", "ok"
	case t.State.Final():
		term.Text, term.Tone = "the task ended "+stateWords(t.State, t.ToolError)+", not cancelled", "warn"
	default:
		term.Text, term.Tone = "still "+stateWords(t.State, false)+": the work may not have stopped", "idle"
	}
	steps = append(steps, term)
	late := CancelStep{Name: "Effect (verifier)", Done: d.DomainOutcome != operations.OutcomePending}
	switch d.DomainOutcome {
	case operations.OutcomeApplied:
		late.Text, late.Tone = "late effect found: the system of record confirms the effect was applied", "bad"
	case operations.OutcomeNotApplied:
		late.Text, late.Tone = "no effect: the system of record confirms nothing was applied", "ok"
	case operations.OutcomeCompensated:
		late.Text, late.Tone = "the effect was applied and compensated", "info"
	case operations.OutcomeUnknown:
		late.Text, late.Tone = "unknown: a person must find out (reconciliation)", "bad"
	default:
		late.Text, late.Tone = "not verified yet: cancellation does not prove nothing happened", "idle"
	}
	return append(steps, late)
}

// cancelWords are what the cancel confirmation says: what the task was doing and what may
// already have happened.
func cancelWords(d operations.Detail, wf *config.Workflow, progress string, now time.Time) (doing, mayHave []string) {
	t := d.Task
	doing = append(doing, t.Tool+" on "+t.Server+" for "+d.Tenant+": "+workTitle(d.Operation))
	if d.IntendedEffect != "" {
		doing = append(doing, "Intended effect: "+d.IntendedEffect)
	}
	doing = append(doing, "Running for "+humanDur(now.Sub(d.CreatedAt))+", now "+stateWords(t.State, false)+".")
	if progress != "" {
		doing = append(doing, "Last progress message (not an outcome): “"+progress+"”")
	}
	effect := ""
	if wf != nil {
		effect = wf.Effect
	}
	switch effect {
	case config.EffectReadOnly:
		mayHave = append(mayHave, "The workflow is read-only: cancelling stops work, nothing needs undoing.")
	case config.EffectReversible:
		mayHave = append(mayHave, "The effect may already have been applied; it is reversible, but cancelling does not reverse it.")
	default:
		mayHave = append(mayHave, "The effect may already have been applied: cancelling does not undo it.")
	}
	mayHave = append(mayHave, "The server may finish the work before it sees the request, or refuse it.",
		"The domain outcome stays pending until the verifier confirms what happened.")
	return doing, mayHave
}

// timelineWho names who or what wrote a timeline entry, from its stored source: a person by the
// name stored with the line, the verifier, the server's reply to a cancel or to an answer, a
// poll, a notification, the call to the server or the watcher.
func timelineWho(e operations.TimelineEntry) string {
	switch e.Source {
	case operations.SourcePoll:
		return "poll"
	case operations.SourceNotification:
		return "notification"
	case operations.SourceCreate:
		return "the call to the server"
	case operations.SourceWatcher:
		return "watcher"
	case operations.SourceVerifier:
		return "verifier"
	case operations.SourceCancelReply:
		if e.State == "cancel_unanswered" {
			return "cancel request (no answer from the server)"
		}
		return "server's answer to the cancel"
	case operations.SourceAnswerReply:
		return "server's answer to the answer"
	case operations.SourceOperator:
		if e.Actor != "" {
			return boundText(e.Actor, 80)
		}
		return "a person"
	}
	return boundText(e.Source, 40)
}

// failureReason is why the work failed, in the words of whoever said so, with a label saying
// whose they are: the reason stored on the operation (operations.Operation.FailureReason), the
// same one every list shows. "" when the work did not fail.
func failureReason(op operations.Operation) (string, string) {
	if op.FailureReason == "" {
		return "", ""
	}
	label := "Reason given by the server"
	switch op.FailureReasonBy {
	case operations.FailedByTool:
		label = "Reason given by the tool"
	case operations.FailedByJobAPI:
		label = "Reason given by the job API"
	}
	return boundText(op.FailureReason, 201), label
}

// needsPersonWhy says in words why an operation needs a person: an open question, an open
// reconciliation item (its reason in a few words) or a handoff; "" when it needs none (the
// operation's NeedsPerson, the one definition the lists and counts use).
func needsPersonWhy(d operations.Detail) string {
	if !d.NeedsPerson {
		return ""
	}
	var why []string
	open := d.Task != nil && d.Task.State == operations.StateInputRequired
	for _, in := range d.Inputs {
		open = open || in.State == "open"
	}
	if open {
		why = append(why, "a question to answer")
	}
	switch {
	case d.Reconciliation != nil && d.Reconciliation.ClosedAt == nil:
		why = append(why, reasonShort(d.Reconciliation.Reason))
	case d.Attention == operations.AttentionHandoff:
		why = append(why, reasonShort(reconcile.ReasonHumanHandoff))
	}
	if len(why) == 0 {
		return "handed to a person"
	}
	return strings.Join(why, "; ")
}

// reasonShort is a reconciliation reason in a few words: its text up to the first colon or
// semicolon, starting in lower case ("task creation unacknowledged").
func reasonShort(code string) string {
	text := reconcile.ReasonText(code)
	if text == code {
		return strings.ReplaceAll(code, "_", " ")
	}
	if i := strings.IndexAny(text, ":;"); i > 0 {
		text = text[:i]
	}
	r := []rune(strings.TrimSpace(text))
	if len(r) > 0 {
		r[0] = unicode.ToLower(r[0])
	}
	return string(r)
}
