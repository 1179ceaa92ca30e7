package auth_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRolesHold(t *testing.T) {
	t.Parallel()
	want := map[auth.Role][]auth.Role{
		auth.RoleViewer:      {auth.RoleViewer},
		auth.RoleOperator:    {auth.RoleViewer, auth.RoleOperator},
		auth.RoleSupport:     {auth.RoleViewer, auth.RoleSupport},
		auth.RoleAdmin:       {auth.RoleViewer, auth.RoleOperator, auth.RoleSupport, auth.RoleAdmin},
		auth.RoleApplication: {},
	}
	for r, holds := range want {
		for _, w := range auth.Roles {
			has := false
			for _, h := range holds {
				has = has || h == w
			}
			if r.Has(w) != has {
				t.Errorf("%s.Has(%s) = %v", r, w, !has)
			}
		}
	}
}

func TestScope(t *testing.T) {
	t.Parallel()
	acme := auth.TenantScope("acme")
	both, err := auth.ParseScope(" globex, acme ")
	if err != nil || both.String() != "acme,globex" {
		t.Fatalf("ParseScope: %v %v", both, err)
	}
	if !acme.Allows("acme") || acme.Allows("globex") || acme.Allows("") || !auth.AllTenants.Allows("") {
		t.Error("Allows")
	}
	if !both.Covers(acme) || acme.Covers(both) || acme.Covers(auth.AllTenants) || !auth.AllTenants.Covers(both) {
		t.Error("Covers")
	}
	for _, bad := range []string{"", " , ", "acme;drop"} {
		if _, err := auth.ParseScope(bad); !errors.Is(err, auth.ErrInvalid) {
			t.Errorf("ParseScope(%q): %v", bad, err)
		}
	}
}

func TestPasswordHash(t *testing.T) {
	t.Parallel()
	h := auth.HashPassword("correct horse", auth.TestHashParams)
	if !strings.HasPrefix(h, "$argon2id$v=19$") || strings.Contains(h, "correct") {
		t.Fatalf("hash %q", h)
	}
	if !auth.CheckPassword(h, "correct horse") || auth.CheckPassword(h, "correct horsE") || auth.CheckPassword("garbage", "x") {
		t.Error("CheckPassword")
	}
	if h == auth.HashPassword("correct horse", auth.TestHashParams) {
		t.Error("no salt")
	}
}

func TestTokensHashedShownOnceRevocable(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	s := auth.NewStore(pool, auth.Options{Hash: auth.TestHashParams})
	by := audit.Actor{Name: "t", Kind: audit.KindCLI}
	if _, _, err := s.CreateToken(ctx, by, auth.AllTenants, "app", auth.AllTenants); !errors.Is(err, auth.ErrInvalid) {
		t.Errorf("token for all tenants: %v", err)
	}
	tok, secret, err := s.CreateToken(ctx, by, auth.AllTenants, "app", auth.TenantScope("acme"))
	if err != nil {
		t.Fatal(err)
	}
	var stored int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM api_tokens WHERE secret_hash::text LIKE '%' || $1 || '%' OR name = $2`,
		secret, secret).Scan(&stored); err != nil || stored != 0 {
		t.Errorf("secret stored in clear: %d %v", stored, err)
	}
	p, err := s.Authenticate(ctx, secret)
	if err != nil || p.Kind != auth.KindToken || p.Scope.String() != "acme" || p.Can(auth.RoleViewer) {
		t.Fatalf("Authenticate: %+v %v", p, err)
	}
	if _, err := s.Authenticate(ctx, secret[:len(secret)-1]+"x"); !errors.Is(err, auth.ErrBadToken) {
		t.Errorf("altered secret: %v", err)
	}
	if _, err := s.RevokeToken(ctx, by, auth.TenantScope("globex"), tok.ID); !errors.Is(err, auth.ErrOutOfScope) {
		t.Errorf("revoke out of scope: %v", err)
	}
	if _, err := s.RevokeToken(ctx, by, auth.AllTenants, tok.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, secret); !errors.Is(err, auth.ErrBadToken) {
		t.Errorf("revoked token: %v", err)
	}
}

func TestAccountLifecycle(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	s := auth.NewStore(pool, auth.Options{Hash: auth.TestHashParams})
	by := audit.Actor{Name: "t", Kind: audit.KindCLI}
	a, pw, err := s.CreateAccount(ctx, by, auth.AllTenants, auth.NewAccount{Email: "Ann@Test", Role: auth.RoleSupport, Scope: auth.TenantScope("acme")})
	if err != nil || pw == "" {
		t.Fatal(err)
	}
	if _, _, err := s.CreateAccount(ctx, by, auth.AllTenants, auth.NewAccount{Email: "ann@test", Role: auth.RoleViewer, Scope: auth.AllTenants}); !errors.Is(err, auth.ErrExists) {
		t.Errorf("duplicate email: %v", err)
	}
	sess, err := s.SignIn(ctx, "ann@test", pw, "192.0.2.1", "")
	if err != nil || sess.Account.ID != a.ID || sess.CSRF == "" {
		t.Fatalf("SignIn: %v", err)
	}
	if _, err := s.SetDisabled(ctx, by, auth.AllTenants, a.ID, true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Session(ctx, sess.Token); !errors.Is(err, auth.ErrNoSession) {
		t.Errorf("session of a disabled account: %v", err)
	}
	if _, err := s.SignIn(ctx, "ann@test", pw, "192.0.2.1", ""); !errors.Is(err, auth.ErrSignInFailed) {
		t.Errorf("disabled account signed in: %v", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE target LIKE 'account:%'`).Scan(&n); err != nil || n != 3 {
		t.Errorf("audit rows for create, sign-in, disable: %d %v", n, err)
	}
}
