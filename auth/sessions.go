package auth

import (
	"context"
	"crypto/sha256"
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
	// CSRF is the session's anti-forgery token, sent back in every form.
	CSRF string
	// Account is who is signed in.
	Account Account
	// ExpiresAt is the absolute end of the session.
	ExpiresAt time.Time
}

func hashToken(t string) []byte {
	h := sha256.Sum256([]byte(t))
	return h[:]
}

func emailKey(email string) string { return "email:" + strings.ToLower(strings.TrimSpace(email)) }
func addrKey(addr string) string   { return "addr:" + addr }

// SignIn checks email and password and opens a session. Every failure — unknown or disabled
// account, wrong password, a lock on the email or on the client address — returns
// ErrSignInFailed after the same work, so the answer never tells whether an account exists.
// Failures count against the email and the client address whether or not the account exists.
func (s *Store) SignIn(ctx context.Context, email, password, clientAddr, requestID string) (Session, error) {
	now := s.opt.Now()
	ek, ak := emailKey(email), addrKey(clientAddr)
	var locked bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM signin_throttle WHERE key = ANY($1) AND locked_until > $2)`,
		[]string{ek, ak}, now).Scan(&locked); err != nil {
		return Session{}, fmt.Errorf("sign in: %w", err)
	}
	var hash *string
	var id int64
	var disabled bool
	err := s.pool.QueryRow(ctx, `SELECT id, password_hash, disabled_at IS NOT NULL FROM accounts WHERE lower(email) = lower($1)`,
		strings.TrimSpace(email)).Scan(&id, &hash, &disabled)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return Session{}, fmt.Errorf("sign in: %w", err)
	}
	ok := false
	if hash != nil {
		ok = CheckPassword(*hash, password)
	} else {
		CheckPassword(s.dummyHash, password) // the same work as for a real account
	}
	if locked || !ok || disabled {
		if err := s.fail(ctx, ek, s.opt.MaxFailures, now); err != nil {
			return Session{}, err
		}
		if err := s.fail(ctx, ak, 4*s.opt.MaxFailures, now); err != nil {
			return Session{}, err
		}
		return Session{}, ErrSignInFailed
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM signin_throttle WHERE key = $1`, ek); err != nil {
		return Session{}, fmt.Errorf("sign in: %w", err)
	}
	return s.CreateSession(ctx, id, "auth.signin", requestID)
}

// fail counts one failed sign-in against key and locks it once it reaches limit within the window.
func (s *Store) fail(ctx context.Context, key string, limit int, now time.Time) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO signin_throttle AS t (key, failures, window_start) VALUES ($1, 1, $2)
		ON CONFLICT (key) DO UPDATE SET
			failures     = CASE WHEN t.window_start < $2::timestamptz - $3::interval THEN 1 ELSE t.failures + 1 END,
			window_start = CASE WHEN t.window_start < $2::timestamptz - $3::interval THEN $2 ELSE t.window_start END`,
		key, now, s.opt.Window)
	if err != nil {
		return fmt.Errorf("count failed sign-in: %w", err)
	}
	_, err = s.pool.Exec(ctx, `UPDATE signin_throttle SET locked_until = $2::timestamptz + $3::interval, failures = 0, window_start = $2
		WHERE key = $1 AND failures >= $4`, key, now, s.opt.LockFor, limit)
	if err != nil {
		return fmt.Errorf("lock sign-in: %w", err)
	}
	return nil
}

// CreateSession opens a session for account id and audits it as action ("auth.signin", or
// "auth.proxy_signin" for a trusted proxy). The account must exist and be enabled.
func (s *Store) CreateSession(ctx context.Context, id int64, action, requestID string) (Session, error) {
	now := s.opt.Now()
	sess := Session{Token: randomToken(32), CSRF: randomToken(32), ExpiresAt: now.Add(s.opt.SessionTTL)}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		a, err := scanAccount(tx.QueryRow(ctx, `SELECT `+accountCols+` FROM accounts WHERE id = $1 AND disabled_at IS NULL`, id))
		if err != nil {
			return fmt.Errorf("open session for account %d: %w", id, err)
		}
		sess.Account = a
		if _, err := tx.Exec(ctx, `INSERT INTO sessions (id_hash, account_id, csrf_token, created_at, last_seen_at, expires_at)
			VALUES ($1, $2, $3, $4, $4, $5)`, hashToken(sess.Token), id, sess.CSRF, now, sess.ExpiresAt); err != nil {
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
		SELECT s.csrf_token, s.expires_at, s.last_seen_at,
		       a.id, a.email, a.role, a.all_tenants, a.tenants, a.created_at, a.password_hash IS NOT NULL
		FROM sessions s JOIN accounts a ON a.id = s.account_id
		WHERE s.id_hash = $1 AND a.disabled_at IS NULL`, hashToken(token)).Scan(
		&sess.CSRF, &sess.ExpiresAt, &lastSeen, &a.ID, &a.Email, &role, &a.Scope.All, &a.Scope.Tenants, &a.CreatedAt, &a.HasPassword)
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
	sess.Token = token
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
	if _, err := s.pool.Exec(ctx, `DELETE FROM signin_throttle WHERE coalesce(locked_until, window_start) < $1::timestamptz - $2::interval`,
		now, s.opt.Window); err != nil {
		return 0, fmt.Errorf("purge sign-in throttle: %w", err)
	}
	return tag.RowsAffected(), nil
}
