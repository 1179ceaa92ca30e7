package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/killswitch"
)

// SwitchRow is one kill switch on the kill switch page, with its drain gauge.
type SwitchRow struct {
	killswitch.Switch
	Drain killswitch.Drain
	// NewStarts says what new operations it covers get while it is engaged.
	NewStarts string
}

// KillSwitchView is the kill switch page.
type KillSwitchView struct {
	Page
	Flash, FlashTone string
	Switches         []SwitchRow
	CanChange        bool
	FourEyes         bool
	// Confirm, when set, is the switch whose engagement awaits confirmation.
	Confirm *SwitchRow
	Reason  string
}

// switchRows lists the global switch, every workflow's and every server's, with their drains
// in the principal's scope.
func (s *Server) switchRows(r *http.Request) ([]SwitchRow, error) {
	st := s.deps.Flags.Store()
	set, err := st.Switches(r.Context())
	if err != nil {
		return nil, err
	}
	byKey := map[string]killswitch.Switch{}
	for _, w := range set {
		byKey[w.Variant()] = w
	}
	var list []killswitch.Switch
	add := func(scope, name string) {
		k := killswitch.SwitchVariant(scope, name)
		w, ok := byKey[k]
		if !ok {
			w = killswitch.Switch{Scope: scope, Name: name}
		}
		delete(byKey, k)
		list = append(list, w)
	}
	add(killswitch.ScopeGlobal, "")
	if s.deps.Policy != nil {
		for _, wf := range s.deps.Policy.Workflows {
			add(killswitch.ScopeWorkflow, wf.Name)
		}
		for _, sv := range s.deps.Policy.Servers {
			add(killswitch.ScopeServer, sv.Name)
		}
	}
	for _, w := range set { // switches set for names the policy no longer has
		if _, left := byKey[w.Variant()]; left {
			list = append(list, w)
		}
	}
	all, tenants := principal(r).Scope.SQL()
	rows := make([]SwitchRow, 0, len(list))
	for _, w := range list {
		d, err := st.Drain(r.Context(), w, all, tenants)
		if err != nil {
			return nil, err
		}
		rows = append(rows, SwitchRow{Switch: w, Drain: d, NewStarts: s.newStartsText(w)})
	}
	return rows, nil
}

// newStartsText says what new operations get while w is engaged: the workflows' fallbacks.
func (s *Server) newStartsText(w killswitch.Switch) string {
	if s.deps.Policy == nil {
		return "their workflow's fallback, or refusal"
	}
	kinds := map[string][]string{}
	var order []string
	for _, wf := range s.deps.Policy.Workflows {
		if (w.Scope == killswitch.ScopeWorkflow && wf.Name != w.Name) || (w.Scope == killswitch.ScopeServer && wf.Server != w.Name) {
			continue
		}
		k := wf.Fallback.Kind
		if _, seen := kinds[k]; !seen {
			order = append(order, k)
		}
		kinds[k] = append(kinds[k], wf.Name)
	}
	if len(order) == 0 {
		return "no workflow uses it"
	}
	var parts []string
	for _, k := range order {
		what := "fallback " + enumWords(k)
		if k == "reject" {
			what = "refused"
		}
		parts = append(parts, what+" ("+strings.Join(kinds[k], ", ")+")")
	}
	return strings.Join(parts, "; ")
}

func (s *Server) handleKillSwitch(w http.ResponseWriter, r *http.Request) {
	s.renderKillSwitch(w, r, http.StatusOK, "", "", nil, "")
}

func (s *Server) renderKillSwitch(w http.ResponseWriter, r *http.Request, status int, flash, tone string, confirm *SwitchRow, reason string) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	rows, err := s.switchRows(r)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	if wantsJSON(r) {
		s.killSwitchJSON(w, status, flash, tone, rows, confirm)
		return
	}
	v := KillSwitchView{Page: s.page("Kill switch", "killswitch"), Flash: flash, FlashTone: tone, Switches: rows,
		CanChange: principal(r).Can(auth.RoleOperator), FourEyes: s.deps.KillSwitchFourEyes, Confirm: confirm, Reason: reason}
	s.render(w, r, status, killSwitchPage(v))
}

// switchFromForm reads and checks the scope and name of a switch form.
func (s *Server) switchFromForm(r *http.Request) (scope, name string, ok bool) {
	scope, name = r.PostFormValue("scope"), strings.TrimSpace(r.PostFormValue("name"))
	switch scope {
	case killswitch.ScopeGlobal:
		return scope, "", name == ""
	case killswitch.ScopeWorkflow:
		if s.deps.Policy == nil {
			return "", "", false
		}
		_, ok = s.deps.Policy.Workflow(name)
		return scope, name, ok
	case killswitch.ScopeServer:
		if s.deps.Policy == nil {
			return "", "", false
		}
		_, ok = s.deps.Policy.Server(name)
		return scope, name, ok
	}
	return "", "", false
}

// handleEngage engages a switch after a confirmation step that shows what it drains.
func (s *Server) handleEngage(w http.ResponseWriter, r *http.Request) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	scope, name, ok := s.switchFromForm(r)
	if !ok {
		s.renderKillSwitch(w, r, http.StatusBadRequest, "Choose the global switch, a workflow of the policy or a server of the policy.", "bad", nil, "")
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	if reason == "" || len(reason) > killswitch.MaxReason {
		s.renderKillSwitch(w, r, http.StatusBadRequest, "Say why (a reason of at most 500 characters is required).", "bad", nil, "")
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		sw := killswitch.Switch{Scope: scope, Name: name}
		all, tenants := principal(r).Scope.SQL()
		d, err := s.deps.Flags.Store().Drain(r.Context(), sw, all, tenants)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		s.renderKillSwitch(w, r, http.StatusOK, "", "", &SwitchRow{Switch: sw, Drain: d, NewStarts: s.newStartsText(sw)}, reason)
		return
	}
	if err := s.deps.Flags.Engage(r.Context(), s.actor(r), scope, name, reason); err != nil {
		s.switchError(w, r, err)
		return
	}
	s.renderKillSwitch(w, r, http.StatusOK, killswitch.SwitchVariant(scope, name)+" engaged: new Task starts it covers are refused; running Tasks drain.", "ok", nil, "")
}

func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	scope, name, ok := s.switchFromForm(r)
	if !ok {
		s.renderKillSwitch(w, r, http.StatusBadRequest, "Unknown switch.", "bad", nil, "")
		return
	}
	pending, err := s.deps.Flags.Release(r.Context(), s.actor(r), scope, name, r.PostFormValue("reason"), s.deps.KillSwitchFourEyes)
	if err != nil {
		s.switchError(w, r, err)
		return
	}
	msg := killswitch.SwitchVariant(scope, name) + " released: new Task starts resume."
	if pending {
		msg = "Release of " + killswitch.SwitchVariant(scope, name) + " requested; another operator must approve it."
	}
	s.renderKillSwitch(w, r, http.StatusOK, msg, "ok", nil, "")
}

func (s *Server) handleApproveRelease(w http.ResponseWriter, r *http.Request) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	scope, name, ok := s.switchFromForm(r)
	if !ok {
		s.renderKillSwitch(w, r, http.StatusBadRequest, "Unknown switch.", "bad", nil, "")
		return
	}
	if err := s.deps.Flags.Approve(r.Context(), s.actor(r), scope, name, r.PostFormValue("reason")); err != nil {
		s.switchError(w, r, err)
		return
	}
	s.renderKillSwitch(w, r, http.StatusOK, killswitch.SwitchVariant(scope, name)+" released after approval.", "ok", nil, "")
}

func (s *Server) switchError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, killswitch.ErrInvalid):
		s.renderKillSwitch(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "killswitch: invalid: "), "bad", nil, "")
	case errors.Is(err, killswitch.ErrFourEyes):
		s.renderKillSwitch(w, r, http.StatusForbidden, "Someone other than who asked for the release must approve it.", "bad", nil, "")
	case errors.Is(err, killswitch.ErrNotFound):
		s.renderKillSwitch(w, r, http.StatusConflict, "That switch is not engaged (or nothing awaits approval).", "bad", nil, "")
	default:
		s.serverError(w, r, err)
	}
}

// handleOFREP serves the OpenFeature Remote Evaluation Protocol, authenticated by API tokens.
func (s *Server) handleOFREP(w http.ResponseWriter, r *http.Request) {
	authn := killswitch.TokenAuth(s.deps.Auth)
	if s.deps.Flags == nil {
		cred, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if _, err := authn(r.Context(), strings.TrimSpace(cred)); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		http.Error(w, "flags are not enabled", http.StatusServiceUnavailable)
		return
	}
	killswitch.OFREP(s.deps.Flags, authn).ServeHTTP(w, r)
}

// switchDrain is the drain gauge of the switch of scope and name, in the principal's scope,
// for the Servers and Workflows pages: nil when flags are off or it cannot be read. engaged is
// whether that switch is engaged.
func (s *Server) switchDrain(r *http.Request, scope, name string) (d *killswitch.Drain, engaged bool) {
	if s.deps.Flags == nil {
		return nil, false
	}
	sw := killswitch.Switch{Scope: scope, Name: name}
	set, err := s.deps.Flags.Store().Switches(r.Context())
	if err != nil {
		s.deps.Logger.ErrorContext(r.Context(), "kill switches", "err", err)
		return nil, false
	}
	for _, x := range set {
		if x.Scope == scope && x.Name == name {
			sw = x
		}
	}
	all, tenants := principal(r).Scope.SQL()
	g, err := s.deps.Flags.Store().Drain(r.Context(), sw, all, tenants)
	if err != nil {
		s.deps.Logger.ErrorContext(r.Context(), "kill switch drain", "switch", sw.Variant(), "err", err)
		return nil, false
	}
	return &g, sw.Engaged
}

func killText(engaged bool) string {
	if engaged {
		return "engaged"
	}
	return "released"
}

// killSwitchJSON answers the kill switch page as JSON for scripts (Accept: application/json;
// POSTs carry the session's X-CSRF-Token header like any console form).
func (s *Server) killSwitchJSON(w http.ResponseWriter, status int, msg, tone string, rows []SwitchRow, confirm *SwitchRow) {
	type gauge struct {
		InFlight       int     `json:"inFlight"`
		Oldest         *string `json:"oldest,omitempty"`
		LatestDeadline *string `json:"latestDeadline,omitempty"`
		FinishedSince  int     `json:"finishedSinceSwitch"`
		Fallbacks      int     `json:"fallbacks"`
	}
	type sw struct {
		Switch    string `json:"switch"`
		Scope     string `json:"scope"`
		Name      string `json:"name,omitempty"`
		Engaged   bool   `json:"engaged"`
		Reason    string `json:"reason,omitempty"`
		Actor     string `json:"actor,omitempty"`
		NewStarts string `json:"newStarts"`
		Drain     gauge  `json:"drain"`
		Pending   string `json:"releaseRequestedBy,omitempty"`
	}
	conv := func(x SwitchRow) sw {
		g := gauge{InFlight: x.Drain.InFlight, FinishedSince: x.Drain.FinishedSince, Fallbacks: x.Drain.Fallbacks}
		if x.Drain.Oldest != nil {
			t := x.Drain.Oldest.UTC().Format(time.RFC3339)
			g.Oldest = &t
		}
		if x.Drain.LatestDeadline != nil {
			t := x.Drain.LatestDeadline.UTC().Format(time.RFC3339)
			g.LatestDeadline = &t
		}
		return sw{Switch: x.Variant(), Scope: x.Scope, Name: x.Name, Engaged: x.Engaged, Reason: x.Reason, Actor: x.Actor,
			NewStarts: x.NewStarts, Drain: g, Pending: x.ReleaseRequestedBy}
	}
	out := map[string]any{}
	if msg != "" {
		out["message"], out["ok"] = msg, tone == "ok"
	}
	if confirm != nil {
		out["confirm"] = conv(*confirm)
		out["message"] = "not engaged yet: send the same form with confirm=yes"
	}
	list := make([]sw, 0, len(rows))
	for _, x := range rows {
		list = append(list, conv(x))
	}
	out["switches"] = list
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(out)
}
