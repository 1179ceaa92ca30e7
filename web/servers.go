package web

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/killswitch"
	"github.com/taskgate/taskgate/manifests"
)

// ServersView is the servers page's model: every configured server in one table.
type ServersView struct {
	Page    Page
	Servers []ServerRow
	// CanProbe is true when the principal may ask for a probe now (operator and up).
	CanProbe bool
	// Flash reports the last probe asked for.
	Flash, FlashTone string
	// Charts are each server's small charts of the last hours.
	Charts []ServerChart
}

// ServerRow is one server as the servers page lists it.
type ServerRow struct {
	Name, URL, EraSetting string
	// Probed is false when the server was never probed.
	Probed    bool
	Reachable bool
	LastProbe time.Time
	LastError string
	// HasManifest is false when no probe ever succeeded.
	HasManifest         bool
	Fingerprint         string
	Era, Protocol       string
	ServerName, Version string
	TaskOps             string
	Tools               []ToolRow
	DroppedTools        int
	Versions            int64
	LastSuccess         time.Time
	ProbeEvery          string
	Workflows           []string
	// Running counts the non-terminal tasks (creating, working, input required) of the server's
	// workflows in the principal's scope: what engaging the kill switch would leave draining.
	Running int
	// KillEngaged counts the server's workflows whose kill switch (or the global one) is engaged;
	// KillUnknown is true when a switch could not be read (starts are blocked: fail safe).
	KillEngaged int
	KillUnknown bool
	// Gauge is the drain gauge of the server's own kill switch (nil without flags).
	Gauge        *killswitch.Drain
	GaugeEngaged bool
}

// killText says what the kill switch of a server's workflows is doing, in words.
func (r ServerRow) killText() string {
	switch {
	case r.KillUnknown:
		return "unreadable: starts blocked"
	case len(r.Workflows) == 0:
		return "no workflows"
	case r.KillEngaged == 0:
		return "released"
	case r.KillEngaged == len(r.Workflows):
		return "engaged"
	}
	return "engaged for " + strconv.Itoa(r.KillEngaged) + " of " + strconv.Itoa(len(r.Workflows)) + " workflows"
}

func (r ServerRow) killTone() string {
	if r.KillUnknown || r.KillEngaged > 0 {
		return "bad"
	}
	if len(r.Workflows) == 0 {
		return "idle"
	}
	return "ok"
}

// drainText says how many running tasks the kill switch drains (engaged) or would drain.
func (r ServerRow) drainText() string {
	n := plural(r.Running, "running task", "running tasks")
	if r.KillUnknown || r.KillEngaged > 0 {
		return n + " draining"
	}
	return "engaging would drain " + n
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// ToolRow is one tool with its mode and annotations.
type ToolRow struct {
	Name, Mode, Hints string
}

// ManifestsView is the manifest history page's model.
type ManifestsView struct {
	Page     Page
	Server   string
	Versions []VersionRow
	// Before is the page's keyset cursor (0: the newest versions); Older, when not 0, is the
	// cursor of the next page of older versions.
	Before, Older int64
	// A and B are the versions compared (0 when fewer than two exist).
	A, B VersionRow
	Diff []string
	// Compared is true when a diff is shown.
	Compared bool
}

// VersionRow is one manifest version.
type VersionRow struct {
	ID                  int64
	Fingerprint         string
	Era, Protocol       string
	ServerName, Version string
	FirstSeen, LastSeen time.Time
	Tools               []ToolRow
	DroppedTools        int
	TaskOps             string
}

func toolRows(m *manifests.Manifest) []ToolRow {
	var out []ToolRow
	for _, t := range m.Tools {
		var hints string
		add := func(name string, v *bool) {
			if v != nil && *v {
				if hints != "" {
					hints += ", "
				}
				hints += name
			}
		}
		add("read-only", t.ReadOnlyHint)
		add("destructive", t.DestructiveHint)
		add("idempotent", t.IdempotentHint)
		out = append(out, ToolRow{Name: t.Name, Mode: manifests.ModeLabel(t.Mode), Hints: hints})
	}
	return out
}

func taskOps(m *manifests.Manifest) string {
	ops := ""
	for _, o := range []struct {
		on   bool
		name string
	}{{m.Tasks.ToolsCall, "tools/call"}, {m.Tasks.Get, "get"}, {m.Tasks.Result, "result"}, {m.Tasks.List, "list"},
		{m.Tasks.Cancel, "cancel"}, {m.Tasks.Update, "update"}} {
		if o.on {
			if ops != "" {
				ops += " · "
			}
			ops += o.name
		}
	}
	if ops == "" {
		return "no Tasks"
	}
	return ops
}

func versionRow(v manifests.Version) VersionRow {
	m := v.Manifest
	return VersionRow{ID: v.ID, Fingerprint: v.Fingerprint, Era: eraLabel(string(m.Era)), Protocol: m.ProtocolVersion,
		ServerName: m.ServerName, Version: m.ServerVersion, FirstSeen: v.FirstSeen, LastSeen: v.LastSeen,
		Tools: toolRows(m), DroppedTools: m.DroppedTools, TaskOps: taskOps(m)}
}

// eraLabel names an era for people.
func eraLabel(era string) string {
	switch era {
	case "2025-11-25":
		return "2025-11-25 core Tasks"
	case "2026-07-28":
		return "2026-07-28 tasks extension"
	}
	return era
}

func (s *Server) serverRows(r *http.Request) ([]ServerRow, error) {
	ctx := r.Context()
	var rows []ServerRow
	if s.deps.Policy == nil {
		return rows, nil
	}
	var inFlight map[string]int
	if ops, ok := s.consoleOps(); ok {
		ov, err := ops.Overview(ctx, apiScope(r), time.Hour)
		if err != nil {
			return nil, err
		}
		inFlight = ov.InFlight
	}
	for _, sv := range s.deps.Policy.Servers {
		row := ServerRow{Name: sv.Name, URL: sv.URL, EraSetting: sv.Era, ProbeEvery: humanDur(sv.ProbeEvery.Duration),
			Workflows: manifests.Affected(s.deps.Policy, sv.Name)}
		row.Gauge, row.GaugeEngaged = s.switchDrain(r, killswitch.ScopeServer, sv.Name)
		for _, wf := range row.Workflows {
			row.Running += inFlight[wf]
			if s.deps.Router == nil {
				continue
			}
			rt, err := s.deps.Router.Route(ctx, wf, "")
			switch {
			case err != nil || rt.Input.KillSwitchUnknown:
				row.KillUnknown = true
			case rt.Input.KillSwitch:
				row.KillEngaged++
			}
		}
		if s.deps.Manifests != nil {
			st, err := s.deps.Manifests.Status(ctx, sv.Name)
			if err != nil {
				return nil, err
			}
			if st.LastProbe != nil {
				row.Probed, row.Reachable, row.LastProbe, row.LastError = true, st.LastProbe.OK, st.LastProbe.At, st.LastProbe.Error
			}
			row.LastSuccess = st.LastSuccess
			if st.Latest != nil {
				m := st.Latest.Manifest
				row.HasManifest, row.Fingerprint = true, st.Latest.Fingerprint
				row.Era, row.Protocol, row.ServerName, row.Version = eraLabel(string(m.Era)), m.ProtocolVersion, m.ServerName, m.ServerVersion
				row.Tools, row.TaskOps, row.Versions = toolRows(m), taskOps(m), st.Latest.ID
				row.DroppedTools = m.DroppedTools
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// handleServers lists every configured server with its reachability and latest manifest.
func (s *Server) handleServers(w http.ResponseWriter, r *http.Request) {
	s.renderServers(w, r, http.StatusOK, "", "")
}

func (s *Server) renderServers(w http.ResponseWriter, r *http.Request, status int, flash, tone string) {
	format, ok := exportFormat(w, r)
	if !ok {
		return
	}
	rows, err := s.serverRows(r)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	if format != "" && r.Method == http.MethodGet {
		s.writeExport(w, r, format, "servers", serverExportHeader, serverExportRows(rows))
		return
	}
	v := ServersView{Page: s.page("MCP servers", "servers"), Servers: rows, Flash: flash, FlashTone: tone,
		CanProbe: s.deps.Prober != nil && s.deps.Manifests != nil && principal(r).Can(auth.RoleOperator)}
	names := make([]string, 0, len(rows))
	for _, row := range rows {
		names = append(names, row.Name)
	}
	v.Charts = s.serverCharts(r, names)
	s.render(w, r, status, serversPage(v))
}

// handleProbeNow probes one server on a new session now, storing the manifest (or the failure)
// and the audit row in one transaction.
func (s *Server) handleProbeNow(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	if s.deps.Policy == nil {
		s.handleNotFound(w, r)
		return
	}
	if _, ok := s.deps.Policy.Server(name); !ok {
		s.handleNotFound(w, r)
		return
	}
	if s.deps.Prober == nil || s.deps.Manifests == nil {
		s.renderServers(w, r, http.StatusServiceUnavailable, "Probing is not available in this console.", "bad")
		return
	}
	actor := s.actor(r)
	by := manifests.Probe{Trigger: manifests.TriggerOperator, Actor: actor.Name}
	at := s.deps.Now().UTC()
	m, probeErr := s.deps.Prober.Read(r.Context(), name)
	var rec manifests.Recorded
	err := s.deps.Manifests.InTx(r.Context(), func(tx pgx.Tx) error {
		after := map[string]any{"ok": probeErr == nil}
		if probeErr != nil {
			if err := s.deps.Manifests.RecordFailureTx(r.Context(), tx, name, at, probeErr, by); err != nil {
				return err
			}
			after["error"] = probeErr.Error()
		} else {
			var err error
			if rec, err = s.deps.Manifests.RecordTx(r.Context(), tx, m, by, manifests.Affected(s.deps.Policy, name)); err != nil {
				return err
			}
			after["fingerprint"], after["changed"], after["version"] = rec.Version.Fingerprint, rec.Changed, rec.Version.ID
			if rec.Changed {
				after["previous"], after["pausedWorkflows"], after["voidedVerdicts"] = rec.PreviousFingerprint, rec.PausedWorkflows, rec.VoidedVerdicts
			}
		}
		return audit.Record(r.Context(), tx, audit.Entry{Actor: actor, Action: "server.probe", Target: "server:" + name,
			After: after, Reason: r.PostFormValue("reason")})
	})
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	switch {
	case probeErr != nil:
		msg := "Probe of " + name + " failed: " + probeErr.Error()
		if errors.Is(probeErr, context.DeadlineExceeded) {
			msg = "Probe of " + name + " timed out."
		}
		s.renderServers(w, r, http.StatusOK, msg, "bad")
	case rec.Changed:
		s.renderServers(w, r, http.StatusOK, "Manifest of "+name+" changed ("+manifests.Short(rec.PreviousFingerprint)+" → "+
			manifests.Short(rec.Version.Fingerprint)+"): gate verdicts voided and promotion paused for its workflows.", "warn")
	default:
		s.renderServers(w, r, http.StatusOK, "Probed "+name+" on a new session: manifest "+manifests.Short(rec.Version.Fingerprint)+
			" (version "+strconv.FormatInt(rec.Version.ID, 10)+").", "ok")
	}
}

// manifestsPageSize is how many manifest versions one page of the history shows.
const manifestsPageSize = 10

// handleManifests shows a server's manifest history, a page at a time (?before=), and the diff
// between two versions (?a=&b=; default: the latest against the one before).
func (s *Server) handleManifests(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "name")
	if s.deps.Policy == nil {
		s.handleNotFound(w, r)
		return
	}
	if _, ok := s.deps.Policy.Server(name); !ok {
		s.handleNotFound(w, r)
		return
	}
	v := ManifestsView{Page: s.page("Manifests of "+name, "servers"), Server: name}
	if s.deps.Manifests != nil {
		q := r.URL.Query()
		before, _ := strconv.ParseInt(q.Get("before"), 10, 64)
		if before < 0 {
			before = 0
		}
		v.Before = before
		hist, err := s.deps.Manifests.History(r.Context(), name, before, manifestsPageSize+1)
		if err != nil {
			s.serverError(w, r, err)
			return
		}
		if len(hist) > manifestsPageSize {
			hist = hist[:manifestsPageSize]
			v.Older = hist[len(hist)-1].ID
		}
		byID := map[int64]manifests.Version{}
		for _, h := range hist {
			v.Versions = append(v.Versions, versionRow(h))
			byID[h.ID] = h
		}
		a, _ := strconv.ParseInt(q.Get("a"), 10, 64)
		b, _ := strconv.ParseInt(q.Get("b"), 10, 64)
		if a == 0 && b == 0 && len(hist) >= 2 {
			a, b = hist[1].ID, hist[0].ID
		}
		// A compared version may lie on another page: read it, if it is this server's.
		lookup := func(id int64) (manifests.Version, bool) {
			if h, ok := byID[id]; ok {
				return h, true
			}
			if id <= 0 {
				return manifests.Version{}, false
			}
			h, err := s.deps.Manifests.Get(r.Context(), id)
			return h, err == nil && h.Server == name
		}
		va, okA := lookup(a)
		vb, okB := lookup(b)
		if okA && okB {
			v.Compared, v.A, v.B = true, versionRow(va), versionRow(vb)
			for _, c := range manifests.Compare(va.Manifest, vb.Manifest).Changes {
				v.Diff = append(v.Diff, c.Sentence())
			}
		}
	}
	s.render(w, r, http.StatusOK, manifestsPage(v))
}

var serverExportHeader = []string{"name", "url", "reachability", "last_probe", "last_error", "era", "protocol", "fingerprint",
	"server_name", "server_version", "task_operations", "workflows", "kill_switch", "running_tasks"}

func serverExportRows(rows []ServerRow) [][]string {
	out := make([][]string, 0, len(rows))
	for _, r := range rows {
		var last string
		if r.Probed {
			last = r.LastProbe.UTC().Format(time.RFC3339)
		}
		out = append(out, []string{r.Name, r.URL, reachText(r), last, r.LastError, r.Era, r.Protocol, r.Fingerprint,
			r.ServerName, r.Version, r.TaskOps, strings.Join(r.Workflows, " "), r.killText(), strconv.Itoa(r.Running)})
	}
	return out
}
