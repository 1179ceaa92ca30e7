// Package secretscan_test signs in, creates API tokens and authenticates with them against a
// real database, then scans a pg_dump of every table for the secrets: none may be stored.
package secretscan_test

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/auth"
	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNoSecretInAnyTable(t *testing.T) {
	t.Parallel()
	bin, err := pgcluster.FindBinaries()
	if err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := pgtest.URL(t)
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	as := auth.NewStore(pool, auth.Options{})
	admin := audit.Actor{Name: "admin@example.com", Kind: audit.KindAccount, Role: "admin"}
	_, password, err := as.CreateAccount(ctx, admin, auth.AllTenants, auth.NewAccount{Email: "scan@example.com", Role: auth.RoleAdmin, Scope: auth.AllTenants})
	if err != nil {
		t.Fatal(err)
	}
	sess, err := as.SignIn(ctx, "scan@example.com", password, "127.0.0.1", "req-1")
	if err != nil {
		t.Fatal(err)
	}
	_, token, err := as.CreateToken(ctx, admin, auth.AllTenants, "billing-app", auth.TenantScope("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := as.Authenticate(ctx, token); err != nil {
		t.Fatal(err)
	}
	if _, err := as.SignIn(ctx, "scan@example.com", "wrong-"+password, "127.0.0.1", "req-2"); err == nil {
		t.Fatal("a wrong password signed in")
	}
	// The CSRF token is derived from the cookie whenever the session is read: the same token
	// comes back, and nothing stored gives it.
	again, err := as.Session(ctx, sess.Token)
	if err != nil || again.CSRF != sess.CSRF || sess.CSRF == "" {
		t.Fatalf("session read again: CSRF %q, signed in with %q (%v)", again.CSRF, sess.CSRF, err)
	}
	secrets := map[string]string{"password": password, "session cookie": sess.Token, "API token": token, "CSRF token": sess.CSRF}
	dump, err := exec.CommandContext(ctx, filepath.Join(bin, "pg_dump"), "--data-only", "--dbname", url).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if !bytes.Contains(dump, []byte("scan@example.com")) {
		t.Fatal("the dump does not hold the account: the scan proves nothing")
	}
	for what, s := range secrets {
		if len(s) < 8 {
			t.Fatalf("%s %q is too short to scan for", what, s)
		}
		if bytes.Contains(dump, []byte(s)) {
			t.Errorf("the %s is stored in the database", what)
		}
	}
	t.Logf("pg_dump of %d bytes scanned for %d secrets", len(dump), len(secrets))
}
