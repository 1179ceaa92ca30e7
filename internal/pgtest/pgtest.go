// Package pgtest gives every test its own real PostgreSQL database.
//
// One cluster serves a whole test binary: TEST_DATABASE_URL when it is set, otherwise a private
// cluster started from the local server binaries (as the console does) and removed when the
// binary ends. A template database is migrated once; each test gets a fresh clone of it, so
// tests run in parallel without seeing each other's rows. Packages that use it call Main from
// their TestMain.
package pgtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/dbpool"
	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/migrations"
)

var (
	once     sync.Once
	initErr  error
	cluster  *pgcluster.Cluster
	adminURL string // a connection URL to the maintenance database
	urlFor   func(db string) string
	template string
	counter  atomic.Int64
	createMu sync.Mutex
)

// Main runs the tests of a package and removes the cluster afterwards. Call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	shutdown()
	os.Exit(code)
}

func shutdown() {
	if template != "" && cluster == nil && adminURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, adminURL); err == nil {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{template}.Sanitize()+" WITH (FORCE)")
			conn.Close(ctx)
		}
	}
	if cluster != nil {
		if err := cluster.Remove(); err != nil {
			log.Printf("pgtest: remove cluster: %v", err)
		}
	}
}

func setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		base, err := url.Parse(u)
		if err != nil || (base.Scheme != "postgres" && base.Scheme != "postgresql") {
			return fmt.Errorf("TEST_DATABASE_URL must be a postgres:// URL")
		}
		adminURL = u
		urlFor = func(db string) string {
			c := *base
			c.Path = "/" + db
			return c.String()
		}
	} else {
		dir, err := os.MkdirTemp("", "taskgate-pgtest-")
		if err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		cluster, err = pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Settings: map[string]string{
			"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
			"max_connections": "400", "shared_buffers": "64MB",
		}})
		if err != nil {
			_ = os.RemoveAll(dir)
			return err
		}
		adminURL = cluster.URL("postgres")
		urlFor = cluster.URL
	}
	template = fmt.Sprintf("taskgate_tmpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{template}.Sanitize()); err != nil {
		return fmt.Errorf("create template: %w", err)
	}
	pool, err := pgxpool.New(ctx, urlFor(template))
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := migrations.NewRunner(pool)
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := r.Up(ctx); err != nil {
		return err
	}
	return nil
}

// URL creates a fresh migrated database for t and returns its connection URL. The database is
// dropped when t ends.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(func() { initErr = setup() })
	if initErr != nil {
		t.Fatalf("pgtest: %v", initErr)
	}
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), counter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	createMu.Lock()
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
	createMu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Errorf("pgtest: connect for drop: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return urlFor(name)
}

// New creates a fresh migrated database for t and returns a pool on it, closed when t ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := dbpool.Config(URL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Cluster returns the private cluster of this test binary, or nil when TEST_DATABASE_URL is used.
// Tests that stop and start the server use it.
func Cluster(t testing.TB) *pgcluster.Cluster {
	t.Helper()
	once.Do(func() { initErr = setup() })
	if initErr != nil {
		t.Fatalf("pgtest: %v", initErr)
	}
	return cluster
}

// planNode is one node of a plan in EXPLAIN (FORMAT JSON)'s form.
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// PlanScans lists the scans of a plan in EXPLAIN (FORMAT JSON)'s form as "Node Type relation
// index" (a bitmap index scan names no relation), depth first.
func PlanScans(raw []byte) ([]string, error) {
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil {
		return nil, err
	}
	if len(plans) == 0 {
		return nil, errors.New("pgtest: an empty plan")
	}
	var out []string
	var walk func(n planNode)
	walk = func(n planNode) {
		if n.Relation != "" || n.Index != "" {
			out = append(out, strings.Join(strings.Fields(n.NodeType+" "+n.Relation+" "+n.Index), " "))
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(plans[0].Plan)
	return out, nil
}
