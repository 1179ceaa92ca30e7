package pgtest_test

import (
	"context"
	"fmt"
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
