package web

// Authentication and authorisation for every console route. The helpers here are the ones
// handlers use:
//
//   - principal(r) is who the request acts for (an account, or an API token under /api/v1).
//   - s.requireRole(auth.RoleOperator) admits only principals holding that role (admin holds
//     every role); routes.go puts it on a group of routes.
//   - s.allowTenant(w, r, tenant) must be called by every handler before it reads or acts on
//     something that belongs to a tenant; when it returns false the refusal is already written.
//   - principal(r).Scope.SQL() gives the arguments of the house list filter
//     `WHERE ($1::bool OR tenant = ANY($2::text[]))`.
//   - s.actor(r) is the audit.Actor to pass to audit.Record with the change's transaction.
//   - @csrfField() goes in every form that POSTs.

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
)

// SessionCookie is the name of the console's session cookie.
const SessionCookie = "tg_session"

// signinCookie carries the sign-in form's anti-forgery token before there is a session.
const signinCookie = "tg_signin"

// csrfField is the form field (and csrfHeader the header) carrying the session's CSRF token.
const (
	csrfField  = "csrf_token"
	csrfHeader = "X-CSRF-Token"
)

// TrustedProxy configures sign-in by an authenticating reverse proxy. When Header is set, a
// request whose peer address is in Proxies and that carries Header is signed in as the enabled
// account with that email; the header is ignored from every other address.
type TrustedProxy struct {
	// Header names the request header holding the signed-in user's email
	// (e.g. X-Forwarded-Email). Empty disables trusted-header sign-in.
	Header string
	// Proxies are the addresses the proxy connects from. Their X-Forwarded-For gives the client
	// address (sign-in throttling) and their X-Forwarded-Proto: https makes cookies Secure,
	// whether or not Header is set.
	Proxies []netip.Prefix
}

type authCtxKey int

const (
	principalKey authCtxKey = iota
	sessionKey
)

// PrincipalFrom returns the principal a request acts for, and false for an anonymous request.
func PrincipalFrom(ctx context.Context) (auth.Principal, bool) {
	p, ok := ctx.Value(principalKey).(auth.Principal)
	return p, ok
}

// principal returns the request's principal; the zero Principal (no role, empty scope) when
// the request is anonymous, which every check refuses.
func principal(r *http.Request) auth.Principal {
	p, _ := PrincipalFrom(r.Context())
	return p
}

func sessionFrom(ctx context.Context) (auth.Session, bool) {
	s, ok := ctx.Value(sessionKey).(auth.Session)
	return s, ok
}

// csrfToken is the session's CSRF token for forms, "" outside a session.
func csrfToken(ctx context.Context) string {
	s, _ := sessionFrom(ctx)
	return s.CSRF
}

// actor is the audit actor of the request's principal.
func (s *Server) actor(r *http.Request) audit.Actor {
	p := principal(r)
	kind := audit.KindAccount
	if p.Kind == auth.KindToken {
		kind = audit.KindToken
	}
	role := string(p.Role)
	if p.Role == auth.RoleApplication {
		role = ""
	}
	return audit.Actor{Name: p.Name, Kind: kind, Role: role, RequestID: requestID(r.Context())}
}

// loadSession puts the signed-in account (from the session cookie, or from a trusted proxy's
// header) in the request's context. It refuses nothing: requireSignIn does.
func (s *Server) loadSession(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), nowKey{}, s.deps.Now)
		r = r.WithContext(ctx)
		var sess auth.Session
		var have bool
		if c, err := r.Cookie(SessionCookie); err == nil && c.Value != "" {
			got, err := s.deps.Auth.Session(ctx, c.Value)
			switch {
			case err == nil:
				sess, have = got, true
			case !errors.Is(err, auth.ErrNoSession):
				s.serverError(w, r, err)
				return
			}
		}
		if email := s.proxyUser(r); email != "" && (!have || !strings.EqualFold(sess.Account.Email, email)) {
			a, err := s.deps.Auth.AccountByEmail(ctx, email)
			if err != nil && !errors.Is(err, auth.ErrNotFound) {
				s.serverError(w, r, err)
				return
			}
			if err != nil || a.Disabled {
				s.forbidden(w, r, "Your proxy signed you in, but there is no enabled console account for you. Ask an administrator.")
				return
			}
			if sess, err = s.deps.Auth.CreateSession(ctx, a.ID, "auth.proxy_signin", requestID(ctx)); err != nil {
				s.serverError(w, r, err)
				return
			}
			s.setSessionCookie(w, r, sess)
			have = true
		}
		if have {
			ctx = context.WithValue(ctx, sessionKey, sess)
			ctx = context.WithValue(ctx, principalKey, sess.Account.Principal())
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// proxyUser returns the email a trusted proxy vouches for, or "".
func (s *Server) proxyUser(r *http.Request) string {
	tp := s.deps.TrustedProxy
	if tp.Header == "" {
		return ""
	}
	v := strings.TrimSpace(r.Header.Get(tp.Header))
	if v == "" {
		return ""
	}
	addr := peerAddr(r)
	if s.fromTrustedProxy(addr) {
		return v
	}
	s.deps.Logger.WarnContext(r.Context(), "trusted-proxy header from an untrusted address ignored",
		"remote", addr.String(), "request_id", requestID(r.Context()))
	return ""
}

func (s *Server) setSessionCookie(w http.ResponseWriter, r *http.Request, sess auth.Session) {
	http.SetCookie(w, &http.Cookie{ //nolint:gosec // Secure follows s.secure: TLS, the setting, or a trusted proxy saying https; a plain-HTTP console would lose the cookie
		Name: SessionCookie, Value: sess.Token, Path: "/", Expires: sess.ExpiresAt,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(r),
	})
}

func (s *Server) clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, //nolint:gosec // Secure follows s.secure: TLS, the setting, or a trusted proxy saying https; a plain-HTTP console would lose the cookie
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: s.secure(r)})
}

// requireSignIn refuses anonymous requests: a page request is sent to the sign-in page, anything
// else (forms, htmx and event streams) gets 401.
func (s *Server) requireSignIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := PrincipalFrom(r.Context()); ok && p.Kind == auth.KindAccount {
			if sess, _ := sessionFrom(r.Context()); sess.PasswordChangeRequired && r.URL.Path != passwordPath && r.URL.Path != "/signout" {
				// A printed password only lets its holder choose a new one.
				if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" {
					http.Redirect(w, r, passwordPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
					return
				}
				w.Header().Set("Cache-Control", "no-store")
				http.Error(w, "choose a new password first", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && r.Header.Get("HX-Request") == "" && !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, "sign in first", http.StatusUnauthorized)
	})
}

// requireRole admits only principals that hold at least one of roles (see auth.Role.Has: every
// role holds viewer, admin holds every role) and answers 403 to the rest. Use it on a route
// group in routes.go:
//
//	r.With(s.requireRole(auth.RoleOperator)).Post("/flags/{key}", s.handleSetFlag)
func (s *Server) requireRole(roles ...auth.Role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p := principal(r)
			for _, want := range roles {
				if p.Can(want) {
					next.ServeHTTP(w, r)
					return
				}
			}
			s.forbidden(w, r, "Your role ("+string(p.Role)+") may not do this.")
		})
	}
}

// allowTenant reports whether the request's principal may read or act on something that
// belongs to tenant. When it may not, the refusal is already written — 404 for reads and
// actions alike, the answer a missing id gets, so another tenant's ids cannot be probed — and
// the handler must return:
//
//	if !s.allowTenant(w, r, op.Tenant) {
//		return
//	}
//
// The empty tenant (something shared by several tenants) is allowed only to a principal whose
// scope is every tenant.
func (s *Server) allowTenant(w http.ResponseWriter, r *http.Request, tenant string) bool {
	if principal(r).Allows(tenant) {
		return true
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		http.Error(w, "not found", http.StatusNotFound)
		return false
	}
	s.handleNotFound(w, r)
	return false
}

// forbidden answers 403 with msg: a page for console requests, text for the API.
func (s *Server) forbidden(w http.ResponseWriter, r *http.Request, msg string) {
	if strings.HasPrefix(r.URL.Path, "/api/") || r.Header.Get("HX-Request") != "" {
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	s.render(w, r, http.StatusForbidden, forbiddenPage(s.page("Not allowed", ""), msg))
}

// crossOrigin refuses state-changing requests a browser marks as coming from another origin
// (Go's http.CrossOriginProtection: Sec-Fetch-Site, then Origin against Host).
func (s *Server) crossOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.deps.Logger.WarnContext(r.Context(), "cross-origin request refused", "path", r.URL.Path, "request_id", requestID(r.Context()))
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	return cop.Handler(next)
}

func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

// checkCSRF refuses a state-changing request that does not carry the session's CSRF token in
// the csrf_token form field or the X-CSRF-Token header.
func (s *Server) checkCSRF(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if unsafeMethod(r.Method) {
			sess, ok := sessionFrom(r.Context())
			got := r.Header.Get(csrfHeader)
			if got == "" {
				got = r.PostFormValue(csrfField)
			}
			if !ok || got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRF)) != 1 {
				s.deps.Logger.WarnContext(r.Context(), "request without a valid CSRF token refused", "path", r.URL.Path,
					"request_id", requestID(r.Context()))
				s.forbidden(w, r, "This form has expired or did not come from this console. Reload the page and try again.")
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// requireToken authenticates /api/v1 requests by their API token (Authorization: Bearer …) and
// puts the token's principal — role auth.RoleApplication, scope the token's tenants — in the
// context. Session cookies do not authenticate the API. Handlers still call allowTenant.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || secret == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskgate"`)
			writeAPI(w, http.StatusUnauthorized, apiProblem{Error: "unauthorized", Message: "an API token is required"})
			return
		}
		p, err := s.deps.Auth.Authenticate(r.Context(), strings.TrimSpace(secret))
		if errors.Is(err, auth.ErrBadToken) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="taskgate", error="invalid_token"`)
			writeAPI(w, http.StatusUnauthorized, apiProblem{Error: "unauthorized", Message: "invalid API token"})
			return
		}
		if err != nil {
			s.apiError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey, p)))
	})
}

// authError maps an auth error to a response; it reports false when err is nil.
func (s *Server) authError(w http.ResponseWriter, r *http.Request, err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, auth.ErrOutOfScope), errors.Is(err, auth.ErrNotFound):
		// The same answer for another tenant's id as for a missing one.
		s.handleNotFound(w, r)
	default:
		s.serverError(w, r, err)
	}
	return true
}

func randomString() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
