package auth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
)

// Token is an API token as lists show it; the secret is never stored.
type Token struct {
	ID int64
	// Name says which application uses it.
	Name string
	// Prefix is the token's public first part ("tg_ab12cd34"), safe to show and log.
	Prefix string
	// Scope is the tenants the token may act for (never all).
	Scope      Scope
	CreatedBy  string
	CreatedAt  time.Time
	LastUsedAt *time.Time
	RevokedAt  *time.Time
}

// Target is how audit rows name the token.
func (t Token) Target() string { return "token:" + strconv.FormatInt(t.ID, 10) + " " + t.Prefix }

func (t Token) auditView() map[string]any {
	return map[string]any{"name": t.Name, "prefix": t.Prefix, "tenants": t.Scope.String(), "revoked": t.RevokedAt != nil}
}

const tokenCols = `id, name, prefix, tenants, created_by, created_at, last_used_at, revoked_at` //nolint:gosec // column names, not a credential

func scanToken(row pgx.Row) (Token, error) {
	var t Token
	err := row.Scan(&t.ID, &t.Name, &t.Prefix, &t.Scope.Tenants, &t.CreatedBy, &t.CreatedAt, &t.LastUsedAt, &t.RevokedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Token{}, ErrNotFound
	}
	return t, err
}

// CreateToken creates an API token named name for the tenants of scope and returns it with its
// secret, which is shown once and never stored. Tokens are always bound to listed tenants; the
// actor's scope must cover them. The change is audited.
func (s *Store) CreateToken(ctx context.Context, by audit.Actor, byScope Scope, name string, scope Scope) (Token, string, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 100 {
		return Token{}, "", fmt.Errorf("%w: a token needs a name of at most 100 characters", ErrInvalid)
	}
	if scope.All {
		return Token{}, "", fmt.Errorf("%w: an API token is bound to listed tenants, not all", ErrInvalid)
	}
	scope = normScope(scope)
	if err := checkScope(scope); err != nil {
		return Token{}, "", err
	}
	if !byScope.Covers(scope) {
		return Token{}, "", fmt.Errorf("create token %q: %w", name, ErrOutOfScope)
	}
	prefix := "tg_" + strings.ToLower(randomHex(4))
	secret := prefix + "_" + randomToken(32)
	var t Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, err = scanToken(tx.QueryRow(ctx, `INSERT INTO api_tokens (name, prefix, secret_hash, tenants, created_by)
			VALUES ($1, $2, $3, $4, $5) RETURNING `+tokenCols, name, prefix, hashToken(secret), scope.Tenants, by.Name))
		if err != nil {
			return fmt.Errorf("create token %q: %w", name, err)
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: by, Tenant: auditTenant(scope), Action: "token.create",
			Target: t.Target(), After: t.auditView()})
	})
	if err != nil {
		return Token{}, "", err
	}
	return t, secret, nil
}

// Tokens lists the tokens whose tenants lie within scope, newest first.
func (s *Store) Tokens(ctx context.Context, scope Scope) ([]Token, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tokenCols+` FROM api_tokens ORDER BY id DESC`)
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Token, error) { return scanToken(r) })
	if err != nil {
		return nil, fmt.Errorf("list tokens: %w", err)
	}
	out := all[:0]
	for _, t := range all {
		if scope.Covers(t.Scope) {
			out = append(out, t)
		}
	}
	return out, nil
}

// TokenByRef returns the token with the id or prefix ref.
func (s *Store) TokenByRef(ctx context.Context, ref string) (Token, error) {
	if id, err := strconv.ParseInt(ref, 10, 64); err == nil {
		return scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenCols+` FROM api_tokens WHERE id = $1`, id))
	}
	return scanToken(s.pool.QueryRow(ctx, `SELECT `+tokenCols+` FROM api_tokens WHERE prefix = $1`, ref))
}

// RevokeToken revokes token id at once; the actor's scope must cover the token's. Revoking a
// revoked token changes nothing but is still audited.
func (s *Store) RevokeToken(ctx context.Context, by audit.Actor, byScope Scope, id int64) (Token, error) {
	var after Token
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		before, err := scanToken(tx.QueryRow(ctx, `SELECT `+tokenCols+` FROM api_tokens WHERE id = $1 FOR UPDATE`, id))
		if err != nil {
			return fmt.Errorf("revoke token %d: %w", id, err)
		}
		if !byScope.Covers(before.Scope) {
			return fmt.Errorf("revoke token %d: %w", id, ErrOutOfScope)
		}
		after, err = scanToken(tx.QueryRow(ctx, `UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1
			RETURNING `+tokenCols, id))
		if err != nil {
			return fmt.Errorf("revoke token %d: %w", id, err)
		}
		return audit.Record(ctx, tx, audit.Entry{Actor: by, Tenant: auditTenant(before.Scope), Action: "token.revoke",
			Target: before.Target(), Before: before.auditView(), After: after.auditView()})
	})
	return after, err
}

// Authenticate returns the principal of the API token secret: KindToken, RoleApplication and
// the token's tenants. Malformed, unknown and revoked tokens give ErrBadToken.
func (s *Store) Authenticate(ctx context.Context, secret string) (Principal, error) {
	parts := strings.SplitN(secret, "_", 3)
	if len(parts) != 3 || parts[0] != "tg" || len(parts[1]) != 8 {
		return Principal{}, ErrBadToken
	}
	var id int64
	var name string
	var hash []byte
	var tenants []string
	var lastUsed *time.Time
	err := s.pool.QueryRow(ctx, `SELECT id, name, secret_hash, tenants, last_used_at FROM api_tokens WHERE prefix = $1 AND revoked_at IS NULL`,
		parts[0]+"_"+parts[1]).Scan(&id, &name, &hash, &tenants, &lastUsed)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrBadToken
	}
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate token: %w", err)
	}
	if subtle.ConstantTimeCompare(hash, hashToken(secret)) != 1 {
		return Principal{}, ErrBadToken
	}
	now := s.opt.Now()
	if lastUsed == nil || now.Sub(*lastUsed) > time.Minute {
		if _, err := s.pool.Exec(ctx, `UPDATE api_tokens SET last_used_at = $2 WHERE id = $1`, id, now); err != nil {
			return Principal{}, fmt.Errorf("authenticate token: %w", err)
		}
	}
	return Principal{Kind: KindToken, ID: id, Name: name, Role: RoleApplication, Scope: TenantScope(tenants...)}, nil
}
