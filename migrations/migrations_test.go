package migrations_test

import (
	"context"
	"testing"
	"testing/fstest"

	"github.com/taskgate/taskgate/internal/pgtest"
	"github.com/taskgate/taskgate/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestEveryUpHasADown(t *testing.T) {
	t.Parallel()
	migs, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(migs) == 0 {
		t.Fatal("no migrations embedded")
	}
	for i, m := range migs {
		if m.Up == "" || m.Down == "" {
			t.Errorf("migration %d_%s lacks a half", m.Version, m.Name)
		}
		if i > 0 && m.Version <= migs[i-1].Version {
			t.Errorf("versions out of order at %d", m.Version)
		}
	}
}

func TestLoadRefusesBadSets(t *testing.T) {
	t.Parallel()
	cases := map[string]fstest.MapFS{
		"missing down": {"00001_a.up.sql": {Data: []byte("SELECT 1")}},
		"missing up":   {"00001_a.down.sql": {Data: []byte("SELECT 1")}},
		"stray file":   {"00001_a.up.sql": {Data: []byte("x")}, "00001_a.down.sql": {Data: []byte("x")}, "notes.txt": {Data: []byte("x")}},
		"two names":    {"00001_a.up.sql": {Data: []byte("x")}, "00001_b.down.sql": {Data: []byte("x")}},
	}
	for name, fsys := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := migrations.Load(fsys); err == nil {
				t.Fatal("Load accepted an invalid migration set")
			}
		})
	}
}

// TestRoundTrip takes a migrated database all the way down and up again, and checks the schema
// is the same both times.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	ctx := context.Background()
	r, err := migrations.NewRunner(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Current(ctx); err != nil {
		t.Fatalf("template not current: %v", err)
	}
	schema := func() string {
		var s string
		err := pool.QueryRow(ctx, `SELECT coalesce(string_agg(table_name || '.' || column_name || ':' || data_type, ',' ORDER BY table_name, ordinal_position), '')
			FROM information_schema.columns WHERE table_schema = 'public' AND table_name <> 'goose_db_version'`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := schema()
	migs, _ := migrations.All()
	n, err := r.Down(ctx, len(migs))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(migs) {
		t.Fatalf("rolled back %d of %d", n, len(migs))
	}
	if s := schema(); s != "" {
		t.Fatalf("tables left after full down: %s", s)
	}
	if err := r.Current(ctx); err == nil {
		t.Fatal("Current reported a rolled-back database as current")
	}
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Applied {
			t.Fatalf("migration %d still applied", s.Version)
		}
	}
	if n, err := r.Up(ctx); err != nil || n != len(migs) {
		t.Fatalf("up again: n=%d err=%v", n, err)
	}
	if after := schema(); after != before {
		t.Fatalf("schema differs after round trip:\nbefore %s\nafter  %s", before, after)
	}
}
