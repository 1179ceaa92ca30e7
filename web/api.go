package web

import (
	"encoding/json"
	"net/http"
)

// handleWhoAmI tells an application which token it presents and which tenants it may act for.
func (s *Server) handleWhoAmI(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	tenants := p.Scope.Tenants
	if tenants == nil {
		tenants = []string{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"token": p.Name, "tenants": tenants})
}
