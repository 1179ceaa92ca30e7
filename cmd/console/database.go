package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/internal/dbpool"
	"github.com/taskgate/taskgate/internal/pgcluster"
	"github.com/taskgate/taskgate/migrations"
)

// dbFlags are the options every command that opens the database shares.
type dbFlags struct {
	url     string
	dataDir string
	// exclusive refuses a data dir another console holds (serve); other commands then use that
	// console's running server.
	exclusive bool
}

func (f *dbFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&f.url, "database-url", getenv("DATABASE_URL"),
		"PostgreSQL URL (env DATABASE_URL); when empty a private cluster runs in DATA_DIR/pg")
	fs.StringVar(&f.dataDir, "data-dir", envOr(getenv, "TASKGATE_DATA_DIR", ".taskgate"),
		"data directory for the private cluster (env TASKGATE_DATA_DIR)")
}

// database is an open pool and, when the console runs its own cluster, that cluster.
type database struct {
	Pool    *pgxpool.Pool
	cluster *pgcluster.Cluster
	release func()
}

// openDatabase connects to DATABASE_URL, or locks the data dir and starts the private cluster.
func openDatabase(ctx context.Context, f dbFlags, logger *slog.Logger) (*database, error) {
	db := &database{}
	url := f.url
	if url == "" {
		release, err := pgcluster.Lock(f.dataDir)
		if errors.Is(err, pgcluster.ErrLocked) && !f.exclusive {
			// A console is running on this data dir: work through its server.
			shared, rerr := pgcluster.Running(filepath.Join(f.dataDir, "pg"), "taskgate")
			if rerr != nil {
				return nil, fmt.Errorf("%w (and its database server is not ready: %v)", err, rerr)
			}
			return connect(ctx, db, shared)
		}
		if err != nil {
			return nil, err
		}
		db.release = release
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(f.dataDir, "pg"), Logger: logger})
		if err != nil {
			release()
			if errors.Is(err, pgcluster.ErrNoBinaries) {
				return nil, err
			}
			return nil, fmt.Errorf("start the private PostgreSQL cluster: %w", err)
		}
		db.cluster = c
		if err := ensureDatabase(ctx, c); err != nil {
			db.Close()
			return nil, err
		}
		url = c.URL("taskgate")
	}
	return connect(ctx, db, url)
}

// connect opens db's pool on url; on failure it closes what db already holds.
func connect(ctx context.Context, db *database, url string) (*database, error) {
	cfg, err := dbpool.Config(url)
	if err != nil {
		db.Close()
		return nil, err
	}
	cfg.MaxConns = 20
	cfg.HealthCheckPeriod = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		db.Close()
		return nil, fmt.Errorf("connect to the database: %w", err)
	}
	db.Pool = pool
	return db, nil
}

// ensureDatabase creates the taskgate database in a fresh private cluster.
func ensureDatabase(ctx context.Context, c *pgcluster.Cluster) error {
	pool, err := pgxpool.New(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer pool.Close()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'taskgate')`).Scan(&exists); err != nil {
		return fmt.Errorf("look for the taskgate database: %w", err)
	}
	if !exists {
		if _, err := pool.Exec(ctx, `CREATE DATABASE taskgate`); err != nil {
			return fmt.Errorf("create the taskgate database: %w", err)
		}
	}
	return nil
}

// Close closes the pool, stops the private cluster and releases the data dir.
func (db *database) Close() {
	if db.Pool != nil {
		db.Pool.Close()
	}
	if db.cluster != nil {
		_ = db.cluster.Stop()
	}
	if db.release != nil {
		db.release()
	}
}

// migrateUp applies pending migrations.
func migrateUp(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	r, err := migrations.NewRunner(pool)
	if err != nil {
		return err
	}
	defer r.Close()
	n, err := r.Up(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		logger.Info("schema migrated", "applied", n)
	}
	return nil
}

// supervisionNote says, for the private cluster, that its supervisor is restarting the server
// or has restarted it.
func (db *database) supervisionNote() string {
	if db.cluster == nil {
		return ""
	}
	select {
	case <-db.cluster.Done():
		return " (the private PostgreSQL server died; the supervisor is restarting it)"
	default:
	}
	if s := db.cluster.Supervision(); s.Restarts > 0 {
		return fmt.Sprintf(" (the private PostgreSQL server was restarted %d times by the supervisor, last at %s)",
			s.Restarts, s.LastRestart.UTC().Format(time.RFC3339))
	}
	return ""
}
