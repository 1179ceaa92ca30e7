package pgtest_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestConcurrentDatabasesAreIsolated creates databases concurrently, writes a marker into each
// from its own goroutine, and checks that each sees only its own row while all are alive.
func TestConcurrentDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	const n = 6
	pools := make([]*pgxpool.Pool, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			p := pgtest.New(t)
			mu.Lock()
			pools[i] = p
			mu.Unlock()
		})
	}
	wg.Wait()
	ctx := context.Background()
	errs := make(chan error, n)
	for i, p := range pools {
		wg.Go(func() {
			_, err := p.Exec(ctx, `INSERT INTO policy_versions (sha256, source, body) VALUES ($1, 'test', '{}')`, fmt.Sprint(i))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range pools {
		var got []string
		rows, err := p.Query(ctx, `SELECT sha256 FROM policy_versions`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			got = append(got, s)
		}
		if len(got) != 1 || got[0] != fmt.Sprint(i) {
			t.Fatalf("database %d sees rows %v", i, got)
		}
	}
}

// TestEveryPackageThatStartsTheClusterRemovesIt: a test binary that reaches the cluster (through
// pgtest or opstest) without pgtest.Main in its TestMain leaves a PostgreSQL server and its
// directory behind after every run. Each such package directory must call pgtest.Main.
func TestEveryPackageThatStartsTheClusterRemovesIt(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	uses, mains := map[string]bool{}, map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, src := filepath.Dir(path), string(b)
		if strings.Contains(src, "pgtest.New(") || strings.Contains(src, "pgtest.URL(") || strings.Contains(src, "opstest.Setup(") {
			uses[dir] = true
		}
		if strings.Contains(src, "pgtest.Main(m)") {
			mains[dir] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) < 5 {
		t.Fatalf("found only %d packages using the cluster; the walk is looking in the wrong place", len(uses))
	}
	for dir := range uses {
		if !mains[dir] {
			t.Errorf("%s: its tests start the cluster but no TestMain calls pgtest.Main, so the cluster is left running", dir)
		}
	}
}
