// Package audit is Taskgate's append-only audit log: who did what to what, with which role, for
// which tenant, before and after, why, under which request, and when.
//
// Every state-changing action writes its entry with Record in the same transaction as the change,
// so a change and its audit row commit or roll back together. The database refuses UPDATE,
// DELETE and TRUNCATE on the log (a trigger), so the application can only append to it.
//
// Record also sends a Postgres notification on ChangeChannel inside that transaction; it is
// delivered when the transaction commits and drives the console's live updates.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ChangeChannel is the Postgres NOTIFY channel Record signals on. The payload is a JSON Change.
const ChangeChannel = "taskgate_changes"

// Sentinel errors.
var (
	// ErrInvalid means an entry lacks its actor or action.
	ErrInvalid = errors.New("audit: invalid entry")
	// ErrBadCursor means a pagination cursor was not one this package produced.
	ErrBadCursor = errors.New("audit: bad cursor")
)

// Actor kinds.
const (
	// KindAccount is a person signed in to the console.
	KindAccount = "account"
	// KindToken is an application using an API token.
	KindToken = "token"
	// KindCLI is someone running a console command on the host.
	KindCLI = "cli"
	// KindSystem is Taskgate itself (watchers, start-up).
	KindSystem = "system"
)

// Actor is who performs an action.
type Actor struct {
	// Name is the account's email, the token's name, or the CLI user.
	Name string
	// Kind is KindAccount, KindToken, KindCLI or KindSystem.
	Kind string
	// Role is the actor's console role ("" for tokens, the CLI and the system).
	Role string
	// RequestID is the HTTP request the action came in on ("" outside a request).
	RequestID string
}

// Entry is one audited action.
type Entry struct {
	// Actor is who did it.
	Actor Actor
	// Tenant is the tenant the action concerns; "" for actions that concern no single tenant
	// (accounts with several tenants, console settings).
	Tenant string
	// Action names what was done, "area.verb" (e.g. "account.create", "killswitch.engage").
	Action string
	// Target names what it was done to (e.g. "account:12", "workflow:refund").
	Target string
	// Before and After are the target's state around the change; nil when there is none. They
	// are stored as JSON and must never hold secrets or elicited values.
	Before, After any
	// Reason is what the actor said about why.
	Reason string
}

// Change is the notification payload sent on ChangeChannel.
type Change struct {
	// Area is the part of Action before the first dot ("account", "killswitch").
	Area string `json:"area"`
	// Tenant is the entry's tenant ("" for none).
	Tenant string `json:"tenant"`
}

// Row is a stored audit entry.
type Row struct {
	ID        int64
	At        time.Time
	Actor     string
	ActorKind string
	Role      string
	Tenant    string
	Action    string
	Target    string
	// Before and After are the stored JSON, or nil.
	Before, After json.RawMessage
	Reason        string
	RequestID     string
}

// Record appends e within tx, the transaction that makes the change it describes.
func Record(ctx context.Context, tx pgx.Tx, e Entry) error {
	if e.Actor.Name == "" || e.Actor.Kind == "" || e.Action == "" {
		return fmt.Errorf("%w: actor, actor kind and action are required", ErrInvalid)
	}
	before, err := marshal(e.Before)
	if err != nil {
		return fmt.Errorf("audit %s: before: %w", e.Action, err)
	}
	after, err := marshal(e.After)
	if err != nil {
		return fmt.Errorf("audit %s: after: %w", e.Action, err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO audit_log (actor, actor_kind, role, tenant, action, target, before, after, reason, request_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		e.Actor.Name, e.Actor.Kind, e.Actor.Role, e.Tenant, e.Action, e.Target, before, after, e.Reason, e.Actor.RequestID,
	); err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	area, _, _ := strings.Cut(e.Action, ".")
	payload, _ := json.Marshal(Change{Area: area, Tenant: e.Tenant})
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChangeChannel, string(payload)); err != nil {
		return fmt.Errorf("audit %s: notify: %w", e.Action, err)
	}
	return nil
}

func marshal(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	if raw, ok := v.(json.RawMessage); ok {
		return raw, nil
	}
	return json.Marshal(v)
}

// Store reads the audit log and records entries in transactions of its own.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Record appends e in a transaction of its own, for actions whose only effect is the entry
// itself (for example a sign-out). Changes use the package-level Record in their transaction.
func (s *Store) Record(ctx context.Context, e Entry) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return Record(ctx, tx, e) })
}

// Filter selects audit rows. Zero fields select everything.
type Filter struct {
	// Actor matches the actor exactly.
	Actor string
	// Action matches the action exactly, or its area when it has no dot ("account").
	Action string
	// Tenant matches the entry's tenant exactly.
	Tenant string
	// Target matches the entry's target exactly ("operation:ID").
	Target string
	// AllTenants and Tenants are the reader's scope: when AllTenants is false only entries for
	// one of Tenants are returned (entries with no tenant are then hidden too).
	AllTenants bool
	Tenants    []string
	// Since and Until bound the time (inclusive, exclusive); zero means unbounded.
	Since, Until time.Time
	// Before is the cursor of the page to continue from ("" for the newest page).
	Before string
	// Limit caps the page (default 50, at most 500).
	Limit int
}

// Page is one page of audit rows, newest first.
type Page struct {
	Rows []Row
	// Next is the cursor for the following (older) page, "" when this is the last.
	Next string
}

// List returns the rows that match f, newest first, a page at a time by keyset on the id.
func (s *Store) List(ctx context.Context, f Filter) (Page, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	if limit > 500 {
		limit = 500
	}
	var before int64
	if f.Before != "" {
		n, err := strconv.ParseInt(f.Before, 10, 64)
		if err != nil || n <= 0 {
			return Page{}, ErrBadCursor
		}
		before = n
	}
	var conds []string
	var args []any
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	if !f.AllTenants {
		add("tenant = ANY(?::text[])", f.Tenants)
	}
	if f.Actor != "" {
		add("actor = ?", f.Actor)
	}
	if f.Action != "" {
		if strings.Contains(f.Action, ".") {
			add("action = ?", f.Action)
		} else {
			add("action LIKE ? || '.%'", f.Action)
		}
	}
	if f.Tenant != "" {
		add("tenant = ?", f.Tenant)
	}
	if f.Target != "" {
		add("target = ?", f.Target)
	}
	if !f.Since.IsZero() {
		add("at >= ?", f.Since)
	}
	if !f.Until.IsZero() {
		add("at < ?", f.Until)
	}
	if before > 0 {
		add("id < ?", before)
	}
	where := ""
	if len(conds) > 0 {
		where = "WHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, limit+1)
	q := `SELECT id, at, actor, actor_kind, role, tenant, action, target, before, after, reason, request_id
		FROM audit_log ` + where + ` ORDER BY id DESC LIMIT $` + strconv.Itoa(len(args))
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		var x Row
		var b, a []byte
		err := r.Scan(&x.ID, &x.At, &x.Actor, &x.ActorKind, &x.Role, &x.Tenant, &x.Action, &x.Target, &b, &a, &x.Reason, &x.RequestID)
		if b != nil {
			x.Before = json.RawMessage(b)
		}
		if a != nil {
			x.After = json.RawMessage(a)
		}
		return x, err
	})
	if err != nil {
		return Page{}, fmt.Errorf("list audit log: %w", err)
	}
	p := Page{Rows: out}
	if len(out) > limit {
		p.Rows = out[:limit]
		p.Next = strconv.FormatInt(p.Rows[limit-1].ID, 10)
	}
	return p, nil
}

// Actions lists the distinct actions in the log, for the audit page's filter.
func (s *Store) Actions(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT action FROM audit_log ORDER BY action`)
	if err != nil {
		return nil, fmt.Errorf("list audit actions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list audit actions: %w", err)
	}
	return out, nil
}
