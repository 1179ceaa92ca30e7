// Package auth holds who may use Taskgate and how they prove it: console accounts with argon2id
// password hashes, server-side sessions, API tokens for applications, roles, tenant scopes and
// sign-in throttling. Every change to accounts and tokens writes its audit row in the same
// transaction.
//
// Roles: viewer reads; operator also drives flags, the kill switch, rollouts and cancellation;
// support also works the reconciliation queue; admin manages accounts and tokens and holds every
// other role's permissions too. A tenant scope is either every tenant or a list of them; every
// read and every action is checked against it.
package auth

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Sentinel errors.
var (
	// ErrNotFound means no such account or token.
	ErrNotFound = errors.New("auth: not found")
	// ErrExists means an account with that email already exists.
	ErrExists = errors.New("auth: already exists")
	// ErrInvalid means an input (email, role, scope, name) is not acceptable.
	ErrInvalid = errors.New("auth: invalid input")
	// ErrSignInFailed is the only error a failed sign-in returns: wrong password, unknown or
	// disabled account and lockout all look the same to the caller.
	ErrSignInFailed = errors.New("auth: sign-in failed")
	// ErrThrottled means sign-in from this client address is waiting after repeated failures
	// (see ThrottledError for how long). Unknown accounts are throttled the same way.
	ErrThrottled = errors.New("auth: sign-in paused after repeated failures")
	// ErrBusy means too many password checks are already running; try again shortly.
	ErrBusy = errors.New("auth: too many sign-ins at once")
	// ErrNoSession means the session cookie is missing, unknown, expired or its account disabled.
	ErrNoSession = errors.New("auth: no valid session")
	// ErrBadToken means an API token is malformed, unknown or revoked.
	ErrBadToken = errors.New("auth: invalid API token")
	// ErrOutOfScope means the actor may not act on that tenant or grant that scope.
	ErrOutOfScope = errors.New("auth: outside the actor's tenant scope")
)

// Role is a console role.
type Role string

// The console roles.
const (
	// RoleViewer may read every page within its tenant scope.
	RoleViewer Role = "viewer"
	// RoleOperator may also change flags, the kill switch and rollouts and cancel tasks.
	RoleOperator Role = "operator"
	// RoleSupport may also claim and resolve reconciliation items.
	RoleSupport Role = "support"
	// RoleAdmin may also manage accounts and API tokens, and holds every other role's rights.
	RoleAdmin Role = "admin"
	// RoleApplication is the role of an API token's principal. No console route admits it.
	RoleApplication Role = "application"
)

// Roles are the console roles, least to most powerful.
var Roles = []Role{RoleViewer, RoleOperator, RoleSupport, RoleAdmin}

// ParseRole returns the console role named s.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if !slices.Contains(Roles, r) {
		return "", fmt.Errorf("%w: role %q: want viewer, operator, support or admin", ErrInvalid, s)
	}
	return r, nil
}

// Has reports whether a principal with role r holds the rights of role want: every console role
// holds viewer, admin holds every role, and otherwise only the role itself.
func (r Role) Has(want Role) bool {
	if !slices.Contains(Roles, r) {
		return false
	}
	switch {
	case r == want:
		return true
	case want == RoleViewer:
		return true
	case r == RoleAdmin:
		return slices.Contains(Roles, want)
	}
	return false
}

// Scope is the set of tenants a principal may see and act on.
type Scope struct {
	// All means every tenant, including ones added later.
	All bool
	// Tenants are the tenants in scope when All is false, sorted.
	Tenants []string
}

// AllTenants is the scope of every tenant.
var AllTenants = Scope{All: true}

// TenantScope returns the scope of the listed tenants.
func TenantScope(tenants ...string) Scope {
	return Scope{Tenants: normTenants(tenants)}
}

// ParseScope reads "all" or a comma-separated list of tenants.
func ParseScope(s string) (Scope, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "all") || s == "*" {
		return AllTenants, nil
	}
	sc := TenantScope(strings.Split(s, ",")...)
	if len(sc.Tenants) == 0 {
		return Scope{}, fmt.Errorf("%w: tenant scope: want \"all\" or a list of tenants", ErrInvalid)
	}
	for _, t := range sc.Tenants {
		if !validTenant(t) {
			return Scope{}, fmt.Errorf("%w: tenant %q", ErrInvalid, t)
		}
	}
	return sc, nil
}

func validTenant(t string) bool {
	if t == "" || len(t) > 64 {
		return false
	}
	for _, c := range t {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func normTenants(ts []string) []string {
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		if t = strings.TrimSpace(t); t != "" && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// Allows reports whether tenant is in the scope. The empty tenant (something that belongs to no
// single tenant) is only in the scope of every tenant.
func (s Scope) Allows(tenant string) bool {
	if s.All {
		return true
	}
	return tenant != "" && slices.Contains(s.Tenants, tenant)
}

// Covers reports whether every tenant of o is in s: an actor with scope s may grant scope o.
func (s Scope) Covers(o Scope) bool {
	if s.All {
		return true
	}
	if o.All {
		return false
	}
	for _, t := range o.Tenants {
		if !slices.Contains(s.Tenants, t) {
			return false
		}
	}
	return true
}

// Intersects reports whether s and o share a tenant.
func (s Scope) Intersects(o Scope) bool {
	if s.All || o.All {
		return true
	}
	for _, t := range o.Tenants {
		if slices.Contains(s.Tenants, t) {
			return true
		}
	}
	return false
}

// SQL returns the two query arguments of the house scope filter
//
//	WHERE ($1::bool OR tenant = ANY($2::text[]))
//
// so every list query filters by the reader's scope the same way.
func (s Scope) SQL() (all bool, tenants []string) {
	if s.Tenants == nil {
		return s.All, []string{}
	}
	return s.All, s.Tenants
}

// String is "all" or the comma-separated tenants.
func (s Scope) String() string {
	if s.All {
		return "all"
	}
	return strings.Join(s.Tenants, ",")
}

// Principal kinds.
const (
	// KindAccount is a person signed in to the console.
	KindAccount = "account"
	// KindToken is an application presenting an API token.
	KindToken = "token"
)

// Principal is who a request acts for: a signed-in account or an API token.
type Principal struct {
	// Kind is KindAccount or KindToken.
	Kind string
	// ID is the account's or the token's id.
	ID int64
	// Name is the account's email or the token's name.
	Name string
	// Role is the account's role; RoleApplication for tokens.
	Role Role
	// Scope is the tenants the principal may see and act on.
	Scope Scope
}

// Can reports whether the principal holds the rights of role want (see Role.Has).
func (p Principal) Can(want Role) bool { return p.Kind == KindAccount && p.Role.Has(want) }

// Allows reports whether tenant is in the principal's scope.
func (p Principal) Allows(tenant string) bool { return p.Scope.Allows(tenant) }
