package dbpool_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/dbpool"
	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// show opens a pool on cfg and returns the session's value of setting.
func show(t *testing.T, cfg *pgxpool.Config, setting string) string {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var v string
	if err := pool.QueryRow(context.Background(), `SELECT current_setting($1)`, setting).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestEverySessionHasJITOff: PostgreSQL's own default is on; a connection made from Config has
// it off, and a URL that sets it keeps its own value.
func TestEverySessionHasJITOff(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	plain, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(t, plain, "jit"); got != "on" {
		t.Fatalf("the server's default jit is %q; this test needs it on to mean anything", got)
	}
	cfg, err := dbpool.Config(url)
	if err != nil {
		t.Fatal(err)
	}
	if got := show(t, cfg, "jit"); got != "off" {
		t.Fatalf("jit is %q on a pool from Config, want off", got)
	}
	own, err := dbpool.Config(url + "&jit=on")
	if err != nil {
		t.Fatal(err)
	}
	if got := show(t, own, "jit"); got != "on" {
		t.Fatalf("a URL's own jit=on became %q", got)
	}
	if _, err := dbpool.Config("postgres://[::1"); err == nil {
		t.Fatal("a malformed URL was accepted")
	}
}
