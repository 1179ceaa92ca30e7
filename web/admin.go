package web

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/taskgate/taskgate/auth"
)

// AccountsView is the accounts page's model.
type AccountsView struct {
	Page     Page
	Accounts []auth.Account
	Roles    []auth.Role
	Tenants  []string
	// Flash reports the last action; Secret is a one-time password shown once with it.
	Flash, FlashTone, Secret string
	// Form keeps what was typed when adding an account failed.
	Form NewAccountForm
	// Self is the signed-in account's id (it may not disable itself).
	Self int64
	// AllTenants is true when the admin holds every tenant and may give all tenants.
	AllTenants bool
}

// NewAccountForm is the add-account form's fields.
type NewAccountForm struct {
	Email, Role, Tenants string
}

// TokensView is the API tokens page's model.
type TokensView struct {
	Page                     Page
	Tokens                   []auth.Token
	Tenants                  []string
	Flash, FlashTone, Secret string
	Form                     NewTokenForm
}

// NewTokenForm is the create-token form's fields.
type NewTokenForm struct {
	Name, Tenants string
}

// knownTenants lists the policy's tenants that are in the principal's scope.
func (s *Server) knownTenants(r *http.Request) []string {
	var out []string
	if s.deps.Policy == nil {
		return out
	}
	for _, t := range s.deps.Policy.Tenants {
		if principal(r).Allows(t) {
			out = append(out, t)
		}
	}
	return out
}

func (s *Server) renderAccounts(w http.ResponseWriter, r *http.Request, status int, v AccountsView) {
	p := principal(r)
	list, err := s.deps.Auth.Accounts(r.Context(), p.Scope)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	v.Page, v.Accounts, v.Roles, v.Tenants, v.Self = s.page("Accounts", "accounts"), list, auth.Roles, s.knownTenants(r), p.ID
	v.AllTenants = p.Scope.All
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, status, accountsPage(v))
}

// handleAccounts lists the accounts the admin's scope covers.
func (s *Server) handleAccounts(w http.ResponseWriter, r *http.Request) {
	s.renderAccounts(w, r, http.StatusOK, AccountsView{Form: NewAccountForm{Role: string(auth.RoleViewer)}})
}

// handleAddAccount creates an account and shows its one-time password once.
func (s *Server) handleAddAccount(w http.ResponseWriter, r *http.Request) {
	f := NewAccountForm{Email: strings.TrimSpace(r.PostFormValue("email")), Role: r.PostFormValue("role"), Tenants: r.PostFormValue("tenants")}
	role, err := auth.ParseRole(f.Role)
	var scope auth.Scope
	if err == nil {
		scope, err = auth.ParseScope(f.Tenants)
	}
	var a auth.Account
	var pw string
	if err == nil {
		a, pw, err = s.deps.Auth.CreateAccount(r.Context(), s.actor(r), principal(r).Scope, auth.NewAccount{Email: f.Email, Role: role, Scope: scope})
	}
	switch {
	case err == nil:
		s.renderAccounts(w, r, http.StatusOK, AccountsView{Flash: "Account " + a.Email + " created. Give them this one-time password; it is not shown again:",
			FlashTone: "ok", Secret: pw, Form: NewAccountForm{Role: string(auth.RoleViewer)}})
	case errors.Is(err, auth.ErrInvalid), errors.Is(err, auth.ErrExists):
		s.renderAccounts(w, r, http.StatusBadRequest, AccountsView{Flash: userMessage(err), FlashTone: "bad", Form: f})
	case errors.Is(err, auth.ErrOutOfScope):
		s.forbidden(w, r, "You may only create accounts within your own tenant scope.")
	default:
		s.serverError(w, r, err)
	}
}

// accountAction runs one of the per-account actions named by the route.
func (s *Server) accountAction(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
		if err != nil {
			s.handleNotFound(w, r)
			return
		}
		p := principal(r)
		if id == p.ID && action == "disable" {
			s.renderAccounts(w, r, http.StatusBadRequest, AccountsView{Flash: "You cannot disable your own account.", FlashTone: "bad"})
			return
		}
		var a auth.Account
		var pw, msg string
		switch action {
		case "disable":
			a, err = s.deps.Auth.SetDisabled(r.Context(), s.actor(r), p.Scope, id, true)
			msg = "Account " + a.Email + " disabled; its sessions have ended."
		case "enable":
			a, err = s.deps.Auth.SetDisabled(r.Context(), s.actor(r), p.Scope, id, false)
			msg = "Account " + a.Email + " enabled."
		case "reset-password":
			a, pw, err = s.deps.Auth.ResetPassword(r.Context(), s.actor(r), p.Scope, id)
			msg = "New one-time password for " + a.Email + "; it is not shown again:"
		}
		if s.authError(w, r, err) {
			return
		}
		s.renderAccounts(w, r, http.StatusOK, AccountsView{Flash: msg, FlashTone: "ok", Secret: pw, Form: NewAccountForm{Role: string(auth.RoleViewer)}})
	}
}

func (s *Server) renderTokens(w http.ResponseWriter, r *http.Request, status int, v TokensView) {
	list, err := s.deps.Auth.Tokens(r.Context(), principal(r).Scope)
	if err != nil {
		s.serverError(w, r, err)
		return
	}
	v.Page, v.Tokens, v.Tenants = s.page("API tokens", "tokens"), list, s.knownTenants(r)
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, status, tokensPage(v))
}

// handleTokens lists the API tokens the admin's scope covers.
func (s *Server) handleTokens(w http.ResponseWriter, r *http.Request) {
	s.renderTokens(w, r, http.StatusOK, TokensView{})
}

// handleCreateToken creates an API token and shows its secret once.
func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	f := NewTokenForm{Name: strings.TrimSpace(r.PostFormValue("name")), Tenants: r.PostFormValue("tenants")}
	scope, err := auth.ParseScope(f.Tenants)
	var t auth.Token
	var secret string
	if err == nil {
		t, secret, err = s.deps.Auth.CreateToken(r.Context(), s.actor(r), principal(r).Scope, f.Name, scope)
	}
	switch {
	case err == nil:
		s.renderTokens(w, r, http.StatusOK, TokensView{Flash: "Token " + t.Name + " created. Copy it now; it is not shown again:",
			FlashTone: "ok", Secret: secret})
	case errors.Is(err, auth.ErrInvalid):
		s.renderTokens(w, r, http.StatusBadRequest, TokensView{Flash: userMessage(err), FlashTone: "bad", Form: f})
	case errors.Is(err, auth.ErrOutOfScope):
		s.forbidden(w, r, "You may only create tokens for tenants within your scope.")
	default:
		s.serverError(w, r, err)
	}
}

// handleRevokeToken revokes an API token at once.
func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil {
		s.handleNotFound(w, r)
		return
	}
	t, err := s.deps.Auth.RevokeToken(r.Context(), s.actor(r), principal(r).Scope, id)
	if s.authError(w, r, err) {
		return
	}
	s.renderTokens(w, r, http.StatusOK, TokensView{Flash: "Token " + t.Name + " (" + t.Prefix + ") revoked.", FlashTone: "ok"})
}

// userMessage turns a validation error into a sentence for the page.
func userMessage(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "auth: "); i >= 0 {
		msg = msg[i+len("auth: "):]
	}
	switch {
	case errors.Is(err, auth.ErrExists):
		return "An account with that email already exists."
	case msg == "":
		return "That was not accepted."
	}
	return strings.ToUpper(msg[:1]) + msg[1:] + "."
}

// handleSetRole changes an account's role and tenant scope. The tenants are picked from the
// policy's list (those in the admin's scope) or "all tenants" for an admin who holds all; the
// store refuses a scope the admin does not cover and audits the change with before and after.
func (s *Server) handleSetRole(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(chi.URLParam(r, "id"), 10, 64)
	if err != nil {
		s.handleNotFound(w, r)
		return
	}
	p := principal(r)
	bad := func(msg string) {
		s.renderAccounts(w, r, http.StatusBadRequest, AccountsView{Flash: msg, FlashTone: "bad", Form: NewAccountForm{Role: string(auth.RoleViewer)}})
	}
	if id == p.ID {
		bad("You cannot change your own role or tenants; ask another administrator.")
		return
	}
	role, err := auth.ParseRole(r.PostFormValue("role"))
	if err != nil {
		bad("Choose a role: " + userMessage(err))
		return
	}
	if err := r.ParseForm(); err != nil {
		bad("The form could not be read.")
		return
	}
	var scope auth.Scope
	if r.PostForm.Get("all_tenants") == "yes" {
		if !p.Scope.All {
			s.forbidden(w, r, "Only an administrator of all tenants may give all tenants.")
			return
		}
		scope = auth.AllTenants
	} else {
		known := s.knownTenants(r)
		picked := r.PostForm["tenant"]
		if len(picked) == 0 {
			bad("Pick at least one tenant, or all tenants.")
			return
		}
		for _, t := range picked {
			if !slices.Contains(known, t) {
				bad("Tenant " + strconv.Quote(t) + " is not one of the policy's tenants in your scope.")
				return
			}
		}
		scope = auth.TenantScope(picked...)
	}
	a, err := s.deps.Auth.SetRole(r.Context(), s.actor(r), p.Scope, id, role, scope)
	if s.authError(w, r, err) {
		return
	}
	s.renderAccounts(w, r, http.StatusOK, AccountsView{Flash: "Account " + a.Email + " is now " + string(a.Role) + " for " + a.Scope.String() + ".",
		FlashTone: "ok", Form: NewAccountForm{Role: string(auth.RoleViewer)}})
}
