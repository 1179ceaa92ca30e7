package auth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
)

// Session is a signed-in browser.
type Session struct {
	// Token is the cookie value. It is only known when the session is created; the database
	// holds its SHA-256.
	Token string
	// CSRF is the session's anti-forgery token, sent back in every form: derived from Token,
	// never stored.
	CSRF string
	// Account is who is signed in.
	Account Account
	// ExpiresAt is the absolute end of the session.
	ExpiresAt time.Time
	// PasswordChangeRequired is true for a session opened with a printed password: it may only
	// change the password.
	PasswordChangeRequired bool
	// FailedSignIns tells the owner, at the sign-in that opened the session, about the failed
	// sign-ins to the account since its previous sign-in (zero Count: none).
	FailedSignIns FailedSignIns
}

// FailedSignIns counts failed sign-ins to an account.
type FailedSignIns struct {
	Count int
	// Last is when the latest one happened and From the client address it came from.
	Last time.Time
	From string
}

// ThrottledError is the ErrThrottled a sign-in gets while its client address must wait.
type ThrottledError struct {
	// RetryAfter is how long until the next attempt is taken.
	RetryAfter time.Duration
}

func (e *ThrottledError) Error() string {
	return fmt.Sprintf("%v: try again in %s", ErrThrottled, e.RetryAfter.Round(time.Second))
}

// Is makes errors.Is(err, ErrThrottled) hold.
func (e *ThrottledError) Is(target error) bool { return target == ErrThrottled }

// csrfToken derives a session's anti-forgery token from its cookie value (HMAC-SHA256 keyed
// by the cookie), so nothing stored in the database forges a form: the sessions table keeps
// only the cookie's hash.
func csrfToken(cookie string) string {
	m := hmac.New(sha256.New, []byte(cookie))
	m.Write([]byte("taskgate csrf v1"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func hashToken(t string) []byte {
	h := sha256.Sum256([]byte(t))
	return h[:]
}

func normKeyEmail(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// pairKeyPrefix starts the throttle keys of email from every address.
func pairKeyPrefix(email string) string { return "pair:" + normKeyEmail(email) + "|" }

// pairKey throttles one client address's attempts at one email; addrKey the address over every
// email. Nothing is keyed on the email alone, so a stranger cannot make its owner wait.
func pairKey(email, addr string) string { return pairKeyPrefix(email) + addr }
func addrKey(addr string) string        { return "addr:" + addr }

// SignIn checks email and password and opens a session. Every failure — unknown or disabled
// account, wrong password — returns ErrSignInFailed after the same work (one password hash,
// under the store's bound on concurrent hashes), so the answer never tells whether an account
// exists. Failures count against the pair of email and client address and against the address;
// past Options.MaxFailures each further attempt from that address must wait a doubling delay,
// answered with a ThrottledError without hashing anything. The owner signing in from another
// address is not delayed. The first delay on an existing account is audited and the account's
// count of failed sign-ins is shown to its owner at the next sign-in. When too many hashes are
// already running the answer is ErrBusy.
func (s *Store) SignIn(ctx context.Context, email, password, clientAddr, requestID string) (Session, error) {
	now := s.opt.Now()
	pk, ak := pairKey(email, clientAddr), addrKey(clientAddr)
	var until *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT max(locked_until) FROM signin_throttle WHERE key = ANY($1) AND locked_until > $2`,
		[]string{pk, ak}, now).Scan(&until); err != nil {
		return Session{}, fmt.Errorf("sign in: %w", err)
	}
	if until != nil {
		return Session{}, &ThrottledError{RetryAfter: until.Sub(now)}
	}
	var hash *string
	var id int64
	var disabled, mustChange bool
	var acctEmail, role string
	var all bool
	var tenants []string
	err := s.pool.QueryRow(ctx, `SELECT id, email, role, all_tenants, tenants, password_hash, disabled_at IS NOT NULL, must_change_password
		FROM accounts WHERE lower(email) = lower($1)`,
		strings.TrimSpace(email)).Scan(&id, &acctEmail, &role, &all, &tenants, &hash, &disabled, &mustChange)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("sign in: %w", err)
	}
	exists := err == nil
	ok := false
	check := s.dummyHash // the same work as for a real account
	if hash != nil {
		check = *hash
	}
	if err := s.withHashSlot(ctx, func() { ok = CheckPassword(check, password) }); err != nil {
		return Session{}, err
	}
	ok = ok && hash != nil
	if !ok || disabled {
		pairFailures, err := s.fail(ctx, pk, s.opt.MaxFailures, now)
		if err != nil {
			return Session{}, err
		}
		if _, err := s.fail(ctx, ak, 4*s.opt.MaxFailures, now); err != nil {
			return Session{}, err
		}
		if exists {
			if err := s.noteFailure(ctx, id, acctEmail, role, all, tenants, clientAddr, requestID, pairFailures, now); err != nil {
				return Session{}, err
			}
		}
		return Session{}, ErrSignInFailed
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM signin_throttle WHERE key = $1`, pk); err != nil {
		return Session{}, fmt.Errorf("sign in: %w", err)
	}
	var failed FailedSignIns
	var last *time.Time
	var from *string
	if err := s.pool.QueryRow(ctx, `UPDATE accounts a SET failed_signins = 0, last_failed_signin_at = NULL, last_failed_signin_from = NULL
		FROM (SELECT id, failed_signins, last_failed_signin_at, last_failed_signin_from FROM accounts WHERE id = $1 FOR UPDATE) old
		WHERE a.id = old.id RETURNING old.failed_signins, old.last_failed_signin_at, old.last_failed_signin_from`, id).Scan(
		&failed.Count, &last, &from); err != nil {
		return Session{}, fmt.Errorf("sign in: %w", err)
	}
	if last != nil {
		failed.Last = *last
	}
	if from != nil {
		failed.From = *from
	}
	sess, err := s.createSession(ctx, id, "auth.signin", requestID, mustChange)
	sess.FailedSignIns = failed
	return sess, err
}

// noteFailure counts a failed sign-in on the account for its owner and, when the pair of email
// and address has just started to wait, audits it.
func (s *Store) noteFailure(ctx context.Context, id int64, email, role string, all bool, tenants []string, addr, requestID string,
	pairFailures int, now time.Time) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET failed_signins = failed_signins + 1, last_failed_signin_at = $2,
			last_failed_signin_from = $3 WHERE id = $1`, id, now, addr); err != nil {
			return fmt.Errorf("count failed sign-in: %w", err)
		}
		if pairFailures != s.opt.MaxFailures {
			return nil
		}
		a := Account{ID: id, Email: email, Scope: Scope{All: all, Tenants: tenants}}
		if all {
			a.Scope.Tenants = nil
		}
		return audit.Record(ctx, tx, audit.Entry{
			Actor:  audit.Actor{Name: "sign-in throttle", Kind: audit.KindSystem, RequestID: requestID},
			Tenant: auditTenant(a.Scope), Action: "auth.signin_throttled", Target: a.Target(),
			After: map[string]any{"address": addr, "failures": pairFailures, "role": role},
		})
	})
}

// Delay is how long an attempt must wait after failures failed ones against a key with
// free failures allowed: nothing up to free, then base doubling per failure, capped at limit.
func Delay(failures, free int, base, limit time.Duration) time.Duration {
	if failures < free {
		return 0
	}
	d := base
	for i := free; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// fail counts one failed sign-in against key and, from the free-th failure within the window
// on, makes the key wait a growing delay; it returns the failures counted.
func (s *Store) fail(ctx context.Context, key string, free int, now time.Time) (int, error) {
	var failures int
	err := s.pool.QueryRow(ctx, `
		INSERT INTO signin_throttle AS t (key, failures, window_start) VALUES ($1, 1, $2)
		ON CONFLICT (key) DO UPDATE SET
			failures     = CASE WHEN t.window_start < $2::timestamptz - $3::interval THEN 1 ELSE t.failures + 1 END,
			window_start = CASE WHEN t.window_start < $2::timestamptz - $3::interval THEN $2 ELSE t.window_start END
		RETURNING failures`,
		key, now, s.opt.Window).Scan(&failures)
	if err != nil {
		return 0, fmt.Errorf("count failed sign-in: %w", err)
	}
	if d := Delay(failures, free, s.opt.BaseDelay, s.opt.MaxDelay); d > 0 {
		if _, err := s.pool.Exec(ctx, `UPDATE signin_throttle SET locked_until = $2 WHERE key = $1`, key, now.Add(d)); err != nil {
			return 0, fmt.Errorf("delay sign-in: %w", err)
		}
	}
	return failures, nil
}

// CreateSession opens a session for account id and audits it as action ("auth.signin", or
// "auth.proxy_signin" for a trusted proxy). The account must exist and be enabled.
func (s *Store) CreateSession(ctx context.Context, id int64, action, requestID string) (Session, error) {
	return s.createSession(ctx, id, action, requestID, false)
}

func (s *Store) createSession(ctx context.Context, id int64, action, requestID string, changeRequired bool) (Session, error) {
	now := s.opt.Now()
	sess := Session{Token: randomToken(32), ExpiresAt: now.Add(s.opt.SessionTTL), PasswordChangeRequired: changeRequired}
	sess.CSRF = csrfToken(sess.Token)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		a, err := scanAccount(tx.QueryRow(ctx, `SELECT `+accountCols+` FROM accounts WHERE id = $1 AND disabled_at IS NULL`, id))
		if err != nil {
			return fmt.Errorf("open session for account %d: %w", id, err)
		}
		sess.Account = a
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (id_hash, account_id, created_at, last_seen_at, expires_at, password_change_required)
			VALUES ($1, $2, $3, $3, $4, $5)`, hashToken(sess.Token), id, now, sess.ExpiresAt, changeRequired); err != nil {
			return fmt.Errorf("open session for account %d: %w", id, err)
		}
		return audit.Record(ctx, tx, audit.Entry{
			Actor:  audit.Actor{Name: a.Email, Kind: audit.KindAccount, Role: string(a.Role), RequestID: requestID},
			Tenant: auditTenant(a.Scope), Action: action, Target: a.Target(),
		})
	})
	if err != nil {
		return Session{}, err
	}
	return sess, nil
}

// Session returns the live session whose cookie value is token, with its account. Expired,
// idle and unknown sessions and disabled accounts give ErrNoSession.
func (s *Store) Session(ctx context.Context, token string) (Session, error) {
	if token == "" {
		return Session{}, ErrNoSession
	}
	now := s.opt.Now()
	var sess Session
	var lastSeen time.Time
	var role string
	a := &sess.Account
	err := s.pool.QueryRow(ctx, `
		SELECT s.expires_at, s.last_seen_at, s.password_change_required,
		       a.id, a.email, a.role, a.all_tenants, a.tenants, a.created_at, a.password_hash IS NOT NULL, a.must_change_password
		FROM sessions s JOIN accounts a ON a.id = s.account_id
		WHERE s.id_hash = $1 AND a.disabled_at IS NULL`, hashToken(token)).Scan(
		&sess.ExpiresAt, &lastSeen, &sess.PasswordChangeRequired, &a.ID, &a.Email, &role, &a.Scope.All, &a.Scope.Tenants,
		&a.CreatedAt, &a.HasPassword, &a.MustChangePassword)
	if errors.Is(err, pgx.ErrNoRows) {
		return Session{}, ErrNoSession
	}
	if err != nil {
		return Session{}, fmt.Errorf("look up session: %w", err)
	}
	a.Role = Role(role)
	if a.Scope.All {
		a.Scope.Tenants = nil
	}
	if !now.Before(sess.ExpiresAt) || now.Sub(lastSeen) > s.opt.SessionIdle {
		_, _ = s.pool.Exec(ctx, `DELETE FROM sessions WHERE id_hash = $1`, hashToken(token))
		return Session{}, ErrNoSession
	}
	if now.Sub(lastSeen) > time.Minute {
		if _, err := s.pool.Exec(ctx, `UPDATE sessions SET last_seen_at = $2 WHERE id_hash = $1`, hashToken(token), now); err != nil {
			return Session{}, fmt.Errorf("touch session: %w", err)
		}
	}
	sess.Token, sess.CSRF = token, csrfToken(token)
	return sess, nil
}

// SignOut ends the session whose cookie value is token and audits it. Ending a session that
// does not exist is not an error.
func (s *Store) SignOut(ctx context.Context, token, requestID string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var a Account
		var role string
		err := tx.QueryRow(ctx, `DELETE FROM sessions s USING accounts a WHERE s.id_hash = $1 AND a.id = s.account_id
			RETURNING a.id, a.email, a.role, a.all_tenants, a.tenants`, hashToken(token)).Scan(&a.ID, &a.Email, &role, &a.Scope.All, &a.Scope.Tenants)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sign out: %w", err)
		}
		return audit.Record(ctx, tx, audit.Entry{
			Actor:  audit.Actor{Name: a.Email, Kind: audit.KindAccount, Role: role, RequestID: requestID},
			Tenant: auditTenant(a.Scope), Action: "auth.signout", Target: a.Target(),
		})
	})
}

// PurgeSessions deletes expired sessions and stale throttle rows; it returns how many sessions
// went.
func (s *Store) PurgeSessions(ctx context.Context) (int64, error) {
	now := s.opt.Now()
	tag, err := s.pool.Exec(ctx, `DELETE FROM sessions WHERE expires_at <= $1 OR last_seen_at < $1::timestamptz - $2::interval`, now, s.opt.SessionIdle)
	if err != nil {
		return 0, fmt.Errorf("purge sessions: %w", err)
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM signin_throttle WHERE greatest(locked_until, window_start + $2::interval) < $1::timestamptz`,
		now, s.opt.Window); err != nil {
		return 0, fmt.Errorf("purge sign-in throttle: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Password lengths a person may choose.
const (
	MinPasswordLen = 12
	MaxPasswordLen = 256
)

// ErrWrongPassword means the current password given to ChangePassword is not the account's.
var ErrWrongPassword = errors.New("auth: the current password is wrong")

// ChangePassword sets the password of the account signed in with session token after checking
// its current one. The new password must be MinPasswordLen to MaxPasswordLen characters and
// differ from the current one. Every other session of the account ends; this one stays open and
// may do everything again. The change is audited.
func (s *Store) ChangePassword(ctx context.Context, token, current, next, requestID string) error {
	sess, err := s.Session(ctx, token)
	if err != nil {
		return err
	}
	if n := len([]rune(next)); n < MinPasswordLen || n > MaxPasswordLen {
		return fmt.Errorf("%w: a password has %d to %d characters", ErrInvalid, MinPasswordLen, MaxPasswordLen)
	}
	if next == current {
		return fmt.Errorf("%w: the new password is the current one", ErrInvalid)
	}
	var hash *string
	if err := s.pool.QueryRow(ctx, `SELECT password_hash FROM accounts WHERE id = $1`, sess.Account.ID).Scan(&hash); err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	if hash == nil {
		return fmt.Errorf("%w: this account signs in through the proxy and has no password", ErrInvalid)
	}
	ok := false
	var newHash string
	if err := s.withHashSlot(ctx, func() { ok = CheckPassword(*hash, current) }); err != nil {
		return err
	}
	if !ok {
		return ErrWrongPassword
	}
	if newHash, err = s.hashPassword(ctx, next); err != nil {
		return err
	}
	a := sess.Account
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE accounts SET password_hash = $2, must_change_password = false, updated_at = now() WHERE id = $1`,
			a.ID, newHash); err != nil {
			return fmt.Errorf("change password: %w", err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM sessions WHERE account_id = $1 AND id_hash <> $2`, a.ID, hashToken(token))
		if err != nil {
			return fmt.Errorf("change password: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE sessions SET password_change_required = false WHERE id_hash = $1`, hashToken(token)); err != nil {
			return fmt.Errorf("change password: %w", err)
		}
		return audit.Record(ctx, tx, audit.Entry{
			Actor:  audit.Actor{Name: a.Email, Kind: audit.KindAccount, Role: string(a.Role), RequestID: requestID},
			Tenant: auditTenant(a.Scope), Action: "account.change_password", Target: a.Target(),
			After: map[string]any{"other_sessions_ended": tag.RowsAffected()},
		})
	})
}

// HashSessionToken is the SHA-256 of a session's cookie value: a name for the session that is
// safe to keep in memory and logs.
func HashSessionToken(token string) []byte { return hashToken(token) }
