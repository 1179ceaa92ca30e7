package web

import (
	"context"
	"net/http"
	"time"

	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/operations"
)

// InboxAPI is what the inbox needs beyond OperationsAPI: the open questions in a scope and when
// each person last looked.
type InboxAPI interface {
	OpenQuestions(ctx context.Context, scope operations.Scope, limit int) (operations.Questions, error)
	LastLooked(ctx context.Context, account int64) (time.Time, error)
	Looked(ctx context.Context, account int64, at time.Time) error
}

// InboxView is the inbox page's model.
type InboxView struct {
	Page        Page
	Unavailable bool
	Flash       string
	// Questions are the open questions, soonest deadline first; Total their real number.
	Questions []InboxQuestion
	Total     int
	// MovedOn are the last day's questions the task left without an answer.
	MovedOn   []InboxQuestion
	CanAnswer bool
	// LastLooked is when this person last opened the inbox (zero: never).
	LastLooked time.Time
	New        int
}

// InboxQuestion is one question with its operation's row.
type InboxQuestion struct {
	Q   operations.Question
	Row OpRow
	// New is true when the question arrived after this person last looked.
	New bool
	// Stale says, loudly, that the task is no longer waiting for this answer ("" when it is).
	Stale string
}

// staleQuestion says, loudly, why an open question can no longer be answered usefully: the
// task ended, expired or became unobservable, or the question's deadline passed ("" when it
// can be answered). It is the operation page's rule (operations.InputClosedReason), in a
// sentence.
func staleQuestion(q operations.Question, now time.Time) string {
	op := q.Operation
	if op.Task == nil {
		return ""
	}
	switch st := op.Task.State; st {
	case operations.StateInputRequired, operations.StateWorking, operations.StateCreating:
		// Leaving input_required closes every open question, so an open one of a task stored
		// as working was asked after that and the stored state has not caught up: it is
		// answerable, as on the operation's page, unless its own deadline passed.
		if why := operations.InputClosedReason(q.PendingInput, st, now); why != "" {
			return "Too late to answer: " + why + "."
		}
		return ""
	case operations.StateExpired:
		return "The task expired on the server before this was answered."
	case operations.StateUnobservable:
		return "The task became unobservable; an answer may never reach it."
	default:
		return "The task ended without this answer (" + stateWords(st, op.Task.ToolError) + ")."
	}
}

// handleInbox lists the open questions across operations in the principal's scope, with their
// deadlines, answerable here, and marks those new since the person last looked.
func (s *Server) handleInbox(w http.ResponseWriter, r *http.Request) {
	v := InboxView{Page: s.page("Inbox", "inbox"), CanAnswer: canAnswer(principal(r))}
	if r.URL.Query().Get("done") == "input-sent" {
		v.Flash = "Answer sent to the server. The question leaves the inbox once the server takes it."
	}
	ops, ok := s.consoleOps()
	ib, ok2 := ops.(InboxAPI)
	if !ok || !ok2 {
		v.Unavailable = true
		s.render(w, r, http.StatusOK, inboxPage(v))
		return
	}
	p := principal(r)
	last, err := ib.LastLooked(r.Context(), p.ID)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	qs, err := ib.OpenQuestions(r.Context(), apiScope(r), 50)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	now := s.deps.Now()
	v.Total, v.LastLooked = qs.Total, last
	for _, q := range qs.Questions {
		iq := InboxQuestion{Q: q, Row: s.opRow(q.Operation, now), New: q.RequestedAt.After(last), Stale: staleQuestion(q, now)}
		if iq.New {
			v.New++
		}
		v.Questions = append(v.Questions, iq)
	}
	for _, q := range qs.MovedOn {
		v.MovedOn = append(v.MovedOn, InboxQuestion{Q: q, Row: s.opRow(q.Operation, now)})
	}
	// A live refresh (htmx) is not the person looking; only a full page load moves the marker.
	if r.Header.Get("HX-Request") == "" && p.Kind == auth.KindAccount {
		if err := ib.Looked(r.Context(), p.ID, now); err != nil {
			s.serverError(w, r, err)
			return
		}
	}
	s.render(w, r, http.StatusOK, inboxPage(v))
}
