package web

import (
	"net/http"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/reconcile"
)

// handleHome is the on-call overview: what needs a person, what is in flight, task state ×
// domain outcome per workflow, kill switch and stage per workflow, recent transition
// violations and the last hours' activity.
func (s *Server) handleHome(w http.ResponseWriter, r *http.Request) {
	v := HomeView{Page: s.page("Overview", "overview"), Window: overviewWindow}
	if p := s.deps.Policy; p != nil {
		v.Policy = PolicySummary{Source: p.Source, SHA256: p.SHA256, Servers: len(p.Servers)}
	}
	ops, ok := s.consoleOps()
	if !ok {
		v.Unavailable = true
		s.render(w, r, http.StatusOK, homePage(v))
		return
	}
	scope := apiScope(r)
	ov, err := ops.Overview(r.Context(), scope, overviewWindow)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	// Every tile counts with the filter of the list it links to: the same query, its real total.
	att, err := ops.List(r.Context(), scope, operations.Filter{Attention: true, Limit: 10})
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	working, err := ops.List(r.Context(), scope, operations.Filter{TaskState: operations.StateWorking, Limit: 1})
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	mism, err := ops.List(r.Context(), scope, operations.Filter{Mismatch: true, Limit: 1})
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	now := s.deps.Now()
	seen := map[string]bool{}
	// Questions first, answerable from the inbox; then the rest of what needs a person.
	if ib, ok := ops.(InboxAPI); ok {
		qs, err := ib.OpenQuestions(r.Context(), scope, 10)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		v.Questions = qs.Total
		for _, q := range qs.Questions {
			if !seen[q.Operation.ID] {
				seen[q.Operation.ID] = true
				v.Person = append(v.Person, s.opRow(q.Operation, now))
			}
		}
	}
	for _, op := range att.Operations {
		if !seen[op.ID] && len(v.Person) < 10 {
			seen[op.ID] = true
			v.Person = append(v.Person, s.opRow(op, now))
		}
	}
	v.fill(s, r, ov)
	v.NeedPerson, v.Working, v.Mismatches = att.Total, working.Total, mism.Total
	// The reconciliation tile counts with the queue's own query and default filter (open items).
	if s.deps.Reconcile != nil {
		if v.OpenRecon, err = s.deps.Reconcile.Count(r.Context(), reconcileScope(r), reconcile.Filter{}); err != nil {
			s.serverError(w, r, err)
			return
		}
	}
	s.render(w, r, http.StatusOK, homePage(v))
}

func (s *Server) handleNotFound(w http.ResponseWriter, r *http.Request) {
	s.render(w, r, http.StatusNotFound, notFoundPage(s.page("Not found", "")))
}

// page fills the layout fields every page shares.
func (s *Server) page(title, section string) Page {
	return Page{Title: title, Section: section, Version: s.deps.Version}
}

// effectTone colours an effect class by how careful an operator must be with it.
func effectTone(effect string) string {
	switch effect {
	case config.EffectReadOnly:
		return "ok"
	case config.EffectReversible:
		return "info"
	default:
		return "warn"
	}
}
