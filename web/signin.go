package web

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/taskgate/taskgate/auth"
)

// signInFailed is the one message every failed sign-in gets: it never says whether the account
// exists, is disabled or is locked.
const signInFailed = "Sign-in failed. Check the email and password. After repeated failures sign-in is paused for a while; ask an administrator if you are stuck."

// SignInView is the sign-in page's model.
type SignInView struct {
	Page  Page
	Email string
	Next  string
	Error string
	// Token is the pre-session anti-forgery token, also set in a cookie.
	Token string
}

// handleSignInForm shows the sign-in form with a fresh anti-forgery token in a cookie and the form.
func (s *Server) handleSignInForm(w http.ResponseWriter, r *http.Request) {
	if p, ok := PrincipalFrom(r.Context()); ok && p.Kind == auth.KindAccount {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther) //nolint:gosec // safeNext keeps it a path on this site
		return
	}
	s.renderSignIn(w, r, http.StatusOK, SignInView{Next: safeNext(r.URL.Query().Get("next"))})
}

func (s *Server) renderSignIn(w http.ResponseWriter, r *http.Request, status int, v SignInView) {
	v.Page = s.page("Sign in", "")
	v.Token = randomString()
	http.SetCookie(w, &http.Cookie{Name: signinCookie, Value: v.Token, Path: "/signin", HttpOnly: true, //nolint:gosec // Secure follows s.secure: TLS, the setting, or a trusted proxy saying https; a plain-HTTP console would lose the cookie
		SameSite: http.SameSiteStrictMode, Secure: s.secure(r), MaxAge: 3600})
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, status, signInPage(v))
}

// handleSignIn checks the credentials and opens a session.
func (s *Server) handleSignIn(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(signinCookie)
	form := r.PostFormValue(csrfField)
	if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(form)) != 1 {
		s.renderSignIn(w, r, http.StatusForbidden, SignInView{Next: safeNext(r.PostFormValue("next")),
			Error: "This form has expired. Please sign in again."})
		return
	}
	email := strings.TrimSpace(r.PostFormValue("email"))
	next := safeNext(r.PostFormValue("next"))
	sess, err := s.deps.Auth.SignIn(r.Context(), email, r.PostFormValue("password"), s.clientAddr(r), requestID(r.Context()))
	var throttled *auth.ThrottledError
	switch {
	case errors.Is(err, auth.ErrSignInFailed):
		s.deps.Logger.InfoContext(r.Context(), "sign-in failed", "request_id", requestID(r.Context()))
		s.renderSignIn(w, r, http.StatusUnauthorized, SignInView{Email: email, Next: next, Error: signInFailed})
		return
	case errors.As(err, &throttled):
		s.deps.Logger.InfoContext(r.Context(), "sign-in throttled", "request_id", requestID(r.Context()))
		w.Header().Set("Retry-After", retryAfter(throttled.RetryAfter))
		s.renderSignIn(w, r, http.StatusTooManyRequests, SignInView{Email: email, Next: next,
			Error: "Too many failed sign-ins from your address. Try again in " + throttled.RetryAfter.Round(time.Second).String() + "."})
		return
	case errors.Is(err, auth.ErrBusy):
		w.Header().Set("Retry-After", "5")
		s.renderSignIn(w, r, http.StatusServiceUnavailable, SignInView{Email: email, Next: next,
			Error: "The console is busy with other sign-ins. Try again in a few seconds."})
		return
	case err != nil:
		s.serverError(w, r, err)
		return
	}
	s.setSessionCookie(w, r, sess)
	http.SetCookie(w, &http.Cookie{Name: signinCookie, Value: "", Path: "/signin", MaxAge: -1, HttpOnly: true, //nolint:gosec // see renderSignIn
		SameSite: http.SameSiteStrictMode, Secure: s.secure(r)})
	if sess.PasswordChangeRequired {
		next = passwordPath + "?next=" + url.QueryEscape(next)
	}
	if f := sess.FailedSignIns; f.Count > 0 {
		// The owner hears of the failed attempts before going on.
		w.Header().Set("Cache-Control", "no-store")
		s.render(w, r, http.StatusOK, failedSignInsPage(s.page("Failed sign-ins", ""), f, absTime(f.Last), next))
		return
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// handleSignOut ends the session.
func (s *Server) handleSignOut(w http.ResponseWriter, r *http.Request) {
	if sess, ok := sessionFrom(r.Context()); ok {
		if err := s.deps.Auth.SignOut(r.Context(), sess.Token, requestID(r.Context())); err != nil {
			s.serverError(w, r, err)
			return
		}
	}
	s.clearSessionCookie(w, r)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// safeNext keeps a post-sign-in redirect on this site: a path, never another host. Browsers
// drop tabs and newlines from a URL and read a backslash as a slash, so "/\t/evil.example" and
// "/\\evil.example" would leave the site: any control character or backslash, and anything that
// parses with a scheme or a host, gives "/".
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/signin") ||
		strings.ContainsRune(next, '\\') || strings.IndexFunc(next, unicode.IsControl) >= 0 {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return next
}
