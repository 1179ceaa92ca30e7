package auth

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
)

// Options tune a Store. Zero fields take the documented defaults.
type Options struct {
	// Hash are the argon2id parameters for new hashes (default DefaultHashParams).
	Hash HashParams
	// SessionTTL is a session's absolute lifetime (default 12 h).
	SessionTTL time.Duration
	// SessionIdle ends a session unused for this long (default 1 h).
	SessionIdle time.Duration
	// MaxFailures is how many failed sign-ins one client address may make against one email
	// within Window before each further attempt waits (default 3); the address over every email
	// gets four times as many. No number of failures locks an account for everyone.
	MaxFailures int
	// Window is the period failures are counted over (default 15 min).
	Window time.Duration
	// BaseDelay is the first wait once MaxFailures is reached; every further failure doubles it
	// (default 2 s).
	BaseDelay time.Duration
	// MaxDelay caps the wait (default 15 min).
	MaxDelay time.Duration
	// MaxHashes is how many password hashes may run at once (default 2); each takes the hash's
	// Memory. More sign-ins queue.
	MaxHashes int
	// HashWait is how long a sign-in queues for a hash before it is refused with ErrBusy
	// (default 5 s).
	HashWait time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.Hash == (HashParams{}) {
		o.Hash = DefaultHashParams
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = time.Hour
	}
	if o.MaxFailures <= 0 {
		o.MaxFailures = 3
	}
	if o.Window <= 0 {
		o.Window = 15 * time.Minute
	}
	if o.BaseDelay <= 0 {
		o.BaseDelay = 2 * time.Second
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 15 * time.Minute
	}
	if o.MaxHashes <= 0 {
		o.MaxHashes = 2
	}
	if o.HashWait <= 0 {
		o.HashWait = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Store keeps accounts, sessions, API tokens and sign-in throttling in Postgres.
type Store struct {
	pool      *pgxpool.Pool
	opt       Options
	dummyHash string
	// hashes holds one token per password hash running; its capacity is Options.MaxHashes.
	hashes chan struct{}
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool, opt Options) *Store {
	opt.defaults()
	return &Store{pool: pool, opt: opt, dummyHash: HashPassword("not a password", opt.Hash),
		hashes: make(chan struct{}, opt.MaxHashes)}
}

// withHashSlot runs f once fewer than Options.MaxHashes hashes are running, waiting at most
// Options.HashWait; it returns ErrBusy when the wait runs out and the context's error when the
// request goes away first. It bounds the memory argon2id takes however many sign-ins arrive.
func (s *Store) withHashSlot(ctx context.Context, f func()) error {
	t := time.NewTimer(s.opt.HashWait)
	defer t.Stop()
	select {
	case s.hashes <- struct{}{}:
	case <-t.C:
		return ErrBusy
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.hashes }()
	f()
	return nil
}

// hashPassword is HashPassword under the store's hash bound.
func (s *Store) hashPassword(ctx context.Context, password string) (string, error) {
	var h string
	err := s.withHashSlot(ctx, func() { h = HashPassword(password, s.opt.Hash) })
	return h, err
}

// Account is a console account.
type Account struct {
	ID        int64
	Email     string
	Role      Role
	Scope     Scope
	Disabled  bool
	CreatedAt time.Time
	// HasPassword is false for accounts that can only sign in through a trusted proxy.
	HasPassword bool
	// MustChangePassword is true while the account's password is one that was printed (a new
	// account or a reset): the next sign-in may only change it.
	MustChangePassword bool
}

// Principal returns the account as a request's principal.
func (a Account) Principal() Principal {
	return Principal{Kind: KindAccount, ID: a.ID, Name: a.Email, Role: a.Role, Scope: a.Scope}
}

// auditView is an account as its audit rows show it (no hash).
func (a Account) auditView() map[string]any {
	return map[string]any{"email": a.Email, "role": a.Role, "tenants": a.Scope.String(), "disabled": a.Disabled}
}

// Target is how audit rows name the account.
func (a Account) Target() string { return "account:" + strconv.FormatInt(a.ID, 10) + " " + a.Email }

// auditTenant is the tenant an audit row about scope s is filed under: its only tenant, or "".
func auditTenant(s Scope) string {
	if !s.All && len(s.Tenants) == 1 {
		return s.Tenants[0]
	}
	return ""
}

const accountCols = `id, email, role, all_tenants, tenants, disabled_at IS NOT NULL, created_at, password_hash IS NOT NULL, must_change_password`

func scanAccount(row pgx.Row) (Account, error) {
	var a Account
	var role string
	err := row.Scan(&a.ID, &a.Email, &role, &a.Scope.All, &a.Scope.Tenants, &a.Disabled, &a.CreatedAt, &a.HasPassword, &a.MustChangePassword)
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, ErrNotFound
	}
	a.Role = Role(role)
	if a.Scope.All {
		a.Scope.Tenants = nil
	}
	return a, err
}

// NewAccount is what creating an account takes.
type NewAccount struct {
	Email string
	Role  Role
	Scope Scope
	// NoPassword creates an account that can only sign in through a trusted proxy.
	NoPassword bool
}

func normEmail(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 254 || strings.ContainsAny(s, " \t\r\n<>") {
		return "", fmt.Errorf("%w: email %q", ErrInvalid, s)
	}
	// Demo accounts use bare hosts (viewer@demo); anything mail.ParseAddress accepts is fine.
	if _, err := mail.ParseAddress(s); err != nil {
		return "", fmt.Errorf("%w: email %q", ErrInvalid, s)
	}
	return s, nil
}

func checkScope(s Scope) error {
	if s.All {
		return nil
	}
	if len(s.Tenants) == 0 {
		return fmt.Errorf("%w: a tenant scope needs at least one tenant, or all", ErrInvalid)
	}
	for _, t := range s.Tenants {
		if !validTenant(t) {
			return fmt.Errorf("%w: tenant %q", ErrInvalid, t)
		}
	}
	return nil
}

// CreateAccount creates an account and returns it with its generated one-time password ("" with
// NoPassword). The actor's scope must cover the new account's; the change is audited.
func (s *Store) CreateAccount(ctx context.Context, by audit.Actor, byScope Scope, in NewAccount) (Account, string, error) {
	email, err := normEmail(in.Email)
	if err != nil {
		return Account{}, "", err
	}
	if _, err := ParseRole(string(in.Role)); err != nil {
		return Account{}, "", err
	}
	in.Scope = normScope(in.Scope)
	if err := checkScope(in.Scope); err != nil {
		return Account{}, "", err
	}
	if !byScope.Covers(in.Scope) {
		return Account{}, "", fmt.Errorf("create account %s: %w", email, ErrOutOfScope)
	}
	var password string
	var hash *string
	if !in.NoPassword {
		password = GeneratePassword()
		h, err := s.hashPassword(ctx, password)
		if err != nil {
			return Account{}, "", err
		}
		hash = &h
	}
	var a Account
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		all, tenants := in.Scope.SQL()
		a, err = scanAccount(tx.QueryRow(ctx, `
			INSERT INTO accounts (email, role, all_tenants, tenants, password_hash, must_change_password)
			VALUES ($1, $2, $3, $4, $5::text, $5::text IS NOT NULL)
			RETURNING `+accountCols, email, string(in.Role), all, tenants, hash))
		if err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23505" {
				return fmt.Errorf("create account %s: %w", email, ErrExists)
			}
			return fmt.Errorf("create account %s: %w", email, err)
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: by, Tenant: auditTenant(a.Scope), Action: "account.create",
			Target: a.Target(), After: a.auditView()})
	})
	if err != nil {
		return Account{}, "", err
	}
	return a, password, nil
}

func normScope(s Scope) Scope {
	if s.All {
		return AllTenants
	}
	return TenantScope(s.Tenants...)
}

// Account returns the account with id.
func (s *Store) Account(ctx context.Context, id int64) (Account, error) {
	return scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountCols+` FROM accounts WHERE id = $1`, id))
}

// AccountByEmail returns the account with email (case-insensitive).
func (s *Store) AccountByEmail(ctx context.Context, email string) (Account, error) {
	return scanAccount(s.pool.QueryRow(ctx, `SELECT `+accountCols+` FROM accounts WHERE lower(email) = lower($1)`, strings.TrimSpace(email)))
}

// Accounts lists the accounts whose scope lies within scope, by email.
func (s *Store) Accounts(ctx context.Context, scope Scope) ([]Account, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+accountCols+` FROM accounts ORDER BY lower(email)`)
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Account, error) { return scanAccount(r) })
	if err != nil {
		return nil, fmt.Errorf("list accounts: %w", err)
	}
	out := all[:0]
	for _, a := range all {
		if scope.Covers(a.Scope) {
			out = append(out, a)
		}
	}
	return out, nil
}

// changeAccount locks account id, checks the actor may manage it, applies change and audits it.
func (s *Store) changeAccount(ctx context.Context, by audit.Actor, byScope Scope, id int64, action string,
	change func(tx pgx.Tx, a Account) (Account, error)) (Account, error) {
	var after Account
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := scanAccount(tx.QueryRow(ctx, `SELECT `+accountCols+` FROM accounts WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return fmt.Errorf("%s %d: %w", action, id, err)
		}
		if !byScope.Covers(before.Scope) {
			return fmt.Errorf("%s %d: %w", action, id, ErrOutOfScope)
		}
		if after, err = change(tx, before); err != nil {
			return fmt.Errorf("%s %d: %w", action, id, err)
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: by, Tenant: auditTenant(before.Scope), Action: action,
			Target: before.Target(), Before: before.auditView(), After: after.auditView()})
	})
	return after, err
}

// SetDisabled disables (ending its sessions) or enables account id.
func (s *Store) SetDisabled(ctx context.Context, by audit.Actor, byScope Scope, id int64, disabled bool) (Account, error) {
	action := "account.enable"
	if disabled {
		action = "account.disable"
	}
	return s.changeAccount(ctx, by, byScope, id, action, func(tx pgx.Tx, a Account) (Account, error) {
		if disabled {
			if _, err := tx.Exec(ctx, `DELETE FROM sessions WHERE account_id = $1`, id); err != nil {
				return a, err
			}
		}
		return scanAccount(tx.QueryRow(ctx, `
			UPDATE accounts SET disabled_at = CASE WHEN $2 THEN coalesce(disabled_at, now()) END, updated_at = now()
			WHERE id = $1 RETURNING `+accountCols, id, disabled))
	})
}

// ResetPassword gives account id a new one-time password, which must be changed at the next
// sign-in, ends its sessions and lifts any sign-in delays on its email; it returns the password.
func (s *Store) ResetPassword(ctx context.Context, by audit.Actor, byScope Scope, id int64) (Account, string, error) {
	password := GeneratePassword()
	hash, err := s.hashPassword(ctx, password)
	if err != nil {
		return Account{}, "", err
	}
	a, err := s.changeAccount(ctx, by, byScope, id, "account.reset_password", func(tx pgx.Tx, a Account) (Account, error) {
		if _, err := tx.Exec(ctx, `DELETE FROM sessions WHERE account_id = $1`, id); err != nil {
			return a, err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM signin_throttle WHERE key LIKE $1`, pairKeyPrefix(a.Email)+"%"); err != nil {
			return a, err
		}
		return scanAccount(tx.QueryRow(ctx, `UPDATE accounts SET password_hash = $2, must_change_password = true, updated_at = now()
			WHERE id = $1 RETURNING `+accountCols, id, hash))
	})
	if err != nil {
		return Account{}, "", err
	}
	return a, password, nil
}

// SetRole changes account id's role and scope; the actor's scope must cover both the old and
// the new scope.
func (s *Store) SetRole(ctx context.Context, by audit.Actor, byScope Scope, id int64, role Role, scope Scope) (Account, error) {
	if _, err := ParseRole(string(role)); err != nil {
		return Account{}, err
	}
	scope = normScope(scope)
	if err := checkScope(scope); err != nil {
		return Account{}, err
	}
	if !byScope.Covers(scope) {
		return Account{}, fmt.Errorf("set role of %d: %w", id, ErrOutOfScope)
	}
	return s.changeAccount(ctx, by, byScope, id, "account.set_role", func(tx pgx.Tx, a Account) (Account, error) {
		all, tenants := scope.SQL()
		return scanAccount(tx.QueryRow(ctx, `UPDATE accounts SET role = $2, all_tenants = $3, tenants = $4, updated_at = now()
			WHERE id = $1 RETURNING `+accountCols, id, string(role), all, tenants))
	})
}

// EnsureAccount creates the account or, when it exists, sets its role and scope, enables it and
// gives it a new password; it returns the password. The demo uses it at every start: its
// passwords are new at every start, so they need not be changed at sign-in.
func (s *Store) EnsureAccount(ctx context.Context, by audit.Actor, in NewAccount) (Account, string, error) {
	a, pw, err := s.ensureAccount(ctx, by, in)
	if err != nil {
		return a, pw, err
	}
	if _, err := s.pool.Exec(ctx, `UPDATE accounts SET must_change_password = false WHERE id = $1`, a.ID); err != nil {
		return Account{}, "", fmt.Errorf("ensure account %s: %w", a.Email, err)
	}
	a.MustChangePassword = false
	return a, pw, nil
}

func (s *Store) ensureAccount(ctx context.Context, by audit.Actor, in NewAccount) (Account, string, error) {
	a, pw, err := s.CreateAccount(ctx, by, AllTenants, in)
	if !errors.Is(err, ErrExists) {
		return a, pw, err
	}
	if a, err = s.AccountByEmail(ctx, in.Email); err != nil {
		return Account{}, "", err
	}
	if _, err := s.SetRole(ctx, by, AllTenants, a.ID, in.Role, in.Scope); err != nil {
		return Account{}, "", err
	}
	if a.Disabled {
		if _, err := s.SetDisabled(ctx, by, AllTenants, a.ID, false); err != nil {
			return Account{}, "", err
		}
	}
	return s.ResetPassword(ctx, by, AllTenants, a.ID)
}
