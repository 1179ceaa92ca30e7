package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/killswitch"
)

// FlagRow is one flag on the flags page.
type FlagRow struct {
	Key, State, Definition string
	History                []FlagChangeRow
}

// FlagChangeRow is one change of a flag, with its diff.
type FlagChangeRow struct {
	killswitch.Change
	Diff []string
}

// FlagPreview is what a tenant, workflow and server get from every flag now, and why.
type FlagPreview struct {
	Tenant, Workflow, Server string
	Results                  []killswitch.Result
}

// FlagsView is the flags page.
type FlagsView struct {
	Page
	Flash, FlashTone string
	Flags            []FlagRow
	CanChange        bool
	Preview          *FlagPreview
	ProviderState    string
}

func (s *Server) handleFlags(w http.ResponseWriter, r *http.Request) {
	s.renderFlags(w, r, http.StatusOK, "", "")
}

func (s *Server) renderFlags(w http.ResponseWriter, r *http.Request, status int, flash, tone string) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	snap := s.deps.Flags.Snapshot()
	st, why := s.deps.Flags.State()
	v := FlagsView{Page: s.page("Feature flags", "flags"), Flash: flash, FlashTone: tone,
		CanChange: principal(r).Can(auth.RoleOperator), ProviderState: string(st)}
	if why != "" {
		v.ProviderState += ": " + why
	}
	if snap != nil {
		for _, key := range snap.Keys() {
			f, _ := snap.Definition(key)
			def, _ := json.MarshalIndent(f, "", "  ")
			row := FlagRow{Key: key, State: f.State, Definition: string(def)}
			hist, err := s.deps.Flags.Store().History(r.Context(), key, 20)
			if err != nil {
				s.serverError(w, r, err)
				return
			}
			for _, c := range hist {
				row.History = append(row.History, FlagChangeRow{Change: c, Diff: killswitch.Diff(c.Before, c.After)})
			}
			v.Flags = append(v.Flags, row)
		}
		if q := r.URL.Query(); q.Get("tenant") != "" {
			tenant := q.Get("tenant")
			if !principal(r).Allows(tenant) {
				s.forbidden(w, r, "That tenant is outside your scope.")
				return
			}
			p := &FlagPreview{Tenant: tenant, Workflow: q.Get("workflow"), Server: q.Get("server")}
			evalCtx := killswitch.StartContext(p.Tenant, p.Workflow, p.Server, s.actor(r).Name)
			for _, key := range snap.Keys() {
				p.Results = append(p.Results, s.deps.Flags.Evaluate(key, evalCtx))
			}
			v.Preview = p
		}
	}
	if r.URL.Query().Get("format") == "json" && snap != nil {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Disposition", `attachment; filename="flags.json"`)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(snap.Document())
		return
	}
	s.render(w, r, status, flagsPage(v))
}

// handlePutFlag creates or replaces a flag from its flagd JSON definition.
func (s *Server) handlePutFlag(w http.ResponseWriter, r *http.Request) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	key := strings.TrimSpace(r.PostFormValue("key"))
	f, err := killswitch.ParseFlag(key, []byte(r.PostFormValue("definition")))
	if err == nil {
		err = s.deps.Flags.Store().PutFlag(r.Context(), s.actor(r), key, f, r.PostFormValue("reason"))
	}
	if err == nil {
		err = s.deps.Flags.Refresh(r.Context())
	}
	s.flagResult(w, r, err, "Flag "+key+" saved.")
}

// handleRevertFlag puts a flag back to its definition before a change.
func (s *Server) handleRevertFlag(w http.ResponseWriter, r *http.Request) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	id, err := strconv.ParseInt(r.PostFormValue("change"), 10, 64)
	if err != nil {
		s.renderFlags(w, r, http.StatusBadRequest, "Choose a change to revert.", "bad")
		return
	}
	err = s.deps.Flags.Store().Revert(r.Context(), s.actor(r), id, r.PostFormValue("reason"))
	if err == nil {
		err = s.deps.Flags.Refresh(r.Context())
	}
	s.flagResult(w, r, err, "Change "+strconv.FormatInt(id, 10)+" reverted.")
}

func (s *Server) flagResult(w http.ResponseWriter, r *http.Request, err error, ok string) {
	switch {
	case err == nil:
		s.renderFlags(w, r, http.StatusOK, ok, "ok")
	case errors.Is(err, killswitch.ErrInvalid):
		s.renderFlags(w, r, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "killswitch: invalid: "), "bad")
	case errors.Is(err, killswitch.ErrNotFound):
		s.renderFlags(w, r, http.StatusNotFound, "No such change.", "bad")
	default:
		s.serverError(w, r, err)
	}
}

func jsonText(v any) string {
	if v == nil {
		return "—"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}

func flagStateTone(state string) string {
	if state == killswitch.StateEnabled {
		return "ok"
	}
	return "idle"
}

// handleFlagHistory exports every flag change (who, when, why, before and after) as CSV or
// JSON (?format=, default json; ?key= for one flag).
func (s *Server) handleFlagHistory(w http.ResponseWriter, r *http.Request) {
	if s.deps.Flags == nil {
		s.handleNotFound(w, r)
		return
	}
	format, ok := exportFormat(w, r)
	if !ok {
		return
	}
	if format == "" {
		format = "json"
	}
	hist, err := s.deps.Flags.Store().History(r.Context(), r.URL.Query().Get("key"), 500)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	rows := make([][]string, 0, len(hist))
	for _, c := range hist {
		rows = append(rows, []string{strconv.FormatInt(c.ID, 10), c.At.UTC().Format("2006-01-02T15:04:05Z"), c.Kind, c.Key,
			c.Actor, c.Reason, string(c.Before), string(c.After)})
	}
	s.writeExport(w, r, format, "flag-history", []string{"id", "at", "kind", "key", "actor", "reason", "before", "after"}, rows)
}

// wantsJSON is true when the client asked for JSON (the console's JSON API for scripts).
func wantsJSON(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}
