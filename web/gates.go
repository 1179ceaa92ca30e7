package web

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/gates"
)

// GatesView is the gate runs page's model.
type GatesView struct {
	Page Page
	Runs []gates.Summary
	// Queue is the open repeat-run queue.
	Queue []gates.QueueItem
	// Workflows are the policy's workflows an operator may start a gate run for.
	Workflows []string
	// CanStart shows the start form (operator and up).
	CanStart bool
	// Server and Workflow are the filters; Next is the older page's URL.
	Server, Workflow, Next string
	// Flash is a message after an action, with its tone (ok, warn, bad).
	Flash, Tone string
	// Evidence is each workflow's gate evidence against its gate server's current manifest
	// and this build: current, stale or missing, with the reasons.
	Evidence []WorkflowEvidence
}

// WorkflowEvidence is one workflow's gate evidence.
type WorkflowEvidence struct {
	Workflow, Server string
	Status           gates.Status
}

// GateRunView is one run's page model.
type GateRunView struct {
	Page Page
	Run  *gates.Stored
}

// handleGates lists gate runs, newest first, by server and workflow, with the repeat queue
// and, for operators, the form that starts a run.
func (s *Server) handleGates(w http.ResponseWriter, r *http.Request) {
	s.renderGates(w, r, http.StatusOK, "", "")
}

func (s *Server) renderGates(w http.ResponseWriter, r *http.Request, status int, flash, tone string) {
	v := GatesView{Page: s.page("Gate runs", "gates"), Flash: flash, Tone: tone}
	if s.deps.Gates == nil {
		s.render(w, r, status, gatesPage(v))
		return
	}
	q := r.URL.Query()
	v.Server, v.Workflow = q.Get("server"), q.Get("workflow")
	var before int64
	if b := q.Get("before"); b != "" {
		var err error
		if before, err = strconv.ParseInt(b, 10, 64); err != nil || before <= 0 {
			http.Error(w, "bad page cursor", http.StatusBadRequest)
			return
		}
	}
	const pageSize = 50
	runs, err := s.deps.Gates.List(r.Context(), gates.Filter{Server: v.Server, Workflow: v.Workflow, Before: before, Limit: pageSize})
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	v.Runs = runs
	if len(runs) == pageSize {
		keep := url.Values{}
		if v.Server != "" {
			keep.Set("server", v.Server)
		}
		if v.Workflow != "" {
			keep.Set("workflow", v.Workflow)
		}
		keep.Set("before", strconv.FormatInt(runs[len(runs)-1].ID, 10))
		v.Next = "/gates?" + keep.Encode()
	}
	if s.deps.Policy != nil && before == 0 {
		for _, wf := range s.deps.Policy.Workflows {
			server := wf.Server
			if wf.Gate != nil && wf.Gate.Server != "" {
				server = wf.Gate.Server
			}
			b := gates.Binding{Workflow: wf.Name, Server: server, Build: s.deps.Version, Pins: wf.Plan().Pins.Map()}
			if s.deps.Manifests != nil {
				if m, err := s.deps.Manifests.Latest(r.Context(), server); err == nil {
					b.ManifestFingerprint = m.Fingerprint
				}
			}
			st, err := s.deps.Gates.Latest(r.Context(), b)
			if err != nil {
				s.serverError(w, r, err)
				return
			}
			v.Evidence = append(v.Evidence, WorkflowEvidence{Workflow: wf.Name, Server: server, Status: st})
		}
	}
	if v.Queue, err = s.deps.Gates.Queue(r.Context()); err != nil {
		s.serverError(w, r, err)
		return
	}
	if p, ok := PrincipalFrom(r.Context()); ok && p.Can(auth.RoleOperator) && s.deps.Policy != nil {
		v.CanStart = true
		for _, wf := range s.deps.Policy.Workflows {
			v.Workflows = append(v.Workflows, wf.Name)
		}
	}
	s.render(w, r, status, gatesPage(v))
}

// handleGateRun shows one run: its binding, every case with its evidence, the deviation
// fingerprint and its diff from the run before.
func (s *Server) handleGateRun(w http.ResponseWriter, r *http.Request) {
	if s.deps.Gates == nil {
		s.handleNotFound(w, r)
		return
	}
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil || id <= 0 {
		s.handleNotFound(w, r)
		return
	}
	run, err := s.deps.Gates.Get(r.Context(), id)
	if errors.Is(err, gates.ErrNotFound) {
		s.handleNotFound(w, r)
		return
	}
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, gateRunPage(GateRunView{Page: s.page("Gate run "+strconv.FormatInt(id, 10), "gates"), Run: run}))
}

// handleStartGate queues a gate run of a workflow's gate target (operator), audited in the
// same transaction; a replica's gate queue runs it.
func (s *Server) handleStartGate(w http.ResponseWriter, r *http.Request) {
	if s.deps.Gates == nil || s.deps.Policy == nil {
		s.renderGates(w, r, http.StatusServiceUnavailable, "Gate runs are not available in this console.", "bad")
		return
	}
	name := r.PostFormValue("workflow")
	wf, ok := s.deps.Policy.Workflow(name)
	if !ok {
		s.renderGates(w, r, http.StatusBadRequest, "Choose a workflow of the policy.", "bad")
		return
	}
	server := wf.Server
	if wf.Gate != nil && wf.Gate.Server != "" {
		server = wf.Gate.Server
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if len(reason) > 500 {
		reason = reason[:500]
	}
	actor := s.actor(r)
	var queued bool
	err := s.deps.Gates.InTx(r.Context(), func(tx pgx.Tx) error {
		var err error
		why := "started by " + actor.Name
		if reason != "" {
			why += ": " + reason
		}
		if queued, err = s.deps.Gates.EnqueueTx(r.Context(), tx, wf.Name, server, why); err != nil {
			return err
		}
		return audit.Record(r.Context(), tx, audit.Entry{Actor: actor, Action: "gate.run", Target: "workflow:" + wf.Name,
			After: map[string]any{"server": server, "queued": queued}, Reason: reason})
	})
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	if !queued {
		s.renderGates(w, r, http.StatusOK, "A gate run of "+wf.Name+" is already queued.", "warn")
		return
	}
	s.renderGates(w, r, http.StatusOK, "Gate run of "+wf.Name+" on "+server+" queued; a replica runs it shortly.", "ok")
}

func verdictTone(v gates.Verdict) string {
	switch v {
	case gates.Pass:
		return "ok"
	case gates.Fail:
		return "bad"
	}
	return "warn"
}

func evidenceTone(st gates.Status) string {
	switch {
	case st.Passing:
		return "ok"
	case st.State == gates.EvidenceCurrent:
		return "bad"
	}
	return "warn"
}

func itoa(n int) string { return strconv.Itoa(n) }

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

func i64(n int64) string { return strconv.FormatInt(n, 10) }
