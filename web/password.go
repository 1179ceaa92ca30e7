package web

import (
	"errors"
	"net/http"

	"github.com/taskgate/taskgate/auth"
)

// passwordPath is where a signed-in person changes their own password; a session opened with a
// printed password may go nowhere else.
const passwordPath = "/account/password"

// PasswordView is the password page's model.
type PasswordView struct {
	Page      Page
	Email     string
	Next      string
	Required  bool
	Flash     string
	FlashTone string
}

func (s *Server) renderPassword(w http.ResponseWriter, r *http.Request, status int, v PasswordView) {
	sess, _ := sessionFrom(r.Context())
	v.Page = s.page("Change password", "")
	v.Email = sess.Account.Email
	v.Required = sess.PasswordChangeRequired
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, status, passwordPage(v))
}

// handlePasswordForm shows the form to change one's own password.
func (s *Server) handlePasswordForm(w http.ResponseWriter, r *http.Request) {
	s.renderPassword(w, r, http.StatusOK, PasswordView{Next: safeNext(r.URL.Query().Get("next"))})
}

// handleChangePassword changes the signed-in account's password after checking the current
// one; the account's other sessions end.
func (s *Server) handleChangePassword(w http.ResponseWriter, r *http.Request) {
	sess, _ := sessionFrom(r.Context())
	next := safeNext(r.PostFormValue("next"))
	v := PasswordView{Next: next, FlashTone: "bad"}
	if r.PostFormValue("new") != r.PostFormValue("confirm") {
		v.Flash = "The two new passwords differ."
		s.renderPassword(w, r, http.StatusUnprocessableEntity, v)
		return
	}
	err := s.deps.Auth.ChangePassword(r.Context(), sess.Token, r.PostFormValue("current"), r.PostFormValue("new"), requestID(r.Context()))
	switch {
	case err == nil:
		http.Redirect(w, r, next, http.StatusSeeOther)
	case errors.Is(err, auth.ErrWrongPassword):
		v.Flash = "The current password is wrong."
		s.renderPassword(w, r, http.StatusUnprocessableEntity, v)
	case errors.Is(err, auth.ErrInvalid):
		v.Flash = userMessage(err)
		s.renderPassword(w, r, http.StatusUnprocessableEntity, v)
	case errors.Is(err, auth.ErrBusy):
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many sign-ins at once; try again in a few seconds", http.StatusServiceUnavailable)
	default:
		s.serverError(w, r, err)
	}
}
