package web

import (
	"net/http"
	"strings"

	"github.com/taskgate/taskgate/config"
)

func (s *Server) handleHome(w http.ResponseWriter, r *http.Request) {
	v := HomeView{Page: s.page("Overview", "overview")}
	if p := s.deps.Policy; p != nil {
		v.Policy = PolicySummary{Source: p.Source, SHA256: p.SHA256, Servers: len(p.Servers)}
		for _, wf := range p.Workflows {
			fb := wf.Fallback.Kind
			if wf.Fallback.Kind == config.FallbackSync {
				fb += " ≤ " + wf.Fallback.MaxDuration.String()
			}
			v.Workflows = append(v.Workflows, WorkflowRow{
				Name: wf.Name, Description: wf.Description, Server: wf.Server, Tool: wf.Tool,
				Effect: wf.Effect, TaskUse: wf.TaskUse, Fallback: fb, Owners: strings.Join(wf.Owners, ", "),
			})
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
