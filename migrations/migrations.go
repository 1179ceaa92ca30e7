// Package migrations holds the numbered schema migrations of Taskgate and applies them.
//
// Each migration is a pair of files, NNNNN_name.up.sql and NNNNN_name.down.sql, embedded in the
// binary. They are run by goose v3 (version table, locking, status) as transactional Go
// migrations built from the files, which keeps the up and down halves in separate files while the
// bookkeeping stays with a maintained runner.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

var fileName = regexp.MustCompile(`^(\d{5})_([a-z0-9_]+)\.(up|down)\.sql$`)

// Migration is one numbered schema change.
type Migration struct {
	Version int64
	Name    string
	Up      string
	Down    string
}

// Load reads and pairs the migrations in fsys. Every up must have a down and the reverse,
// versions must be unique, and no other file may sit among them.
func Load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int64]*Migration{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %q does not match NNNNN_name.up.sql or NNNNN_name.down.sql", e.Name())
		}
		v, _ := strconv.ParseInt(m[1], 10, 64)
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migration %05d has two names: %q and %q", v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %05d_%s needs both an up and a down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// All returns the embedded migrations in order.
func All() ([]Migration, error) { return Load(files) }

// Runner applies the embedded migrations to one database.
type Runner struct {
	provider *goose.Provider
	db       *sql.DB
	latest   int64
}

// NewRunner prepares a runner on pool. Close releases its database handle (not the pool).
func NewRunner(pool *pgxpool.Pool) (*Runner, error) {
	migs, err := All()
	if err != nil {
		return nil, err
	}
	gms := make([]*goose.Migration, 0, len(migs))
	for _, m := range migs {
		gms = append(gms, goose.NewGoMigration(m.Version, execTx(m.Up), execTx(m.Down)))
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, nil,
		goose.WithGoMigrations(gms...), goose.WithDisableGlobalRegistry(true), goose.WithSessionLocker(locker))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migration provider: %w", err)
	}
	var latest int64
	if len(migs) > 0 {
		latest = migs[len(migs)-1].Version
	}
	return &Runner{provider: p, db: db, latest: latest}, nil
}

func execTx(stmt string) *goose.GoFunc {
	return &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, stmt)
		return err
	}}
}

// Close releases the runner's database handle.
func (r *Runner) Close() error { return r.db.Close() }

// Up applies every pending migration and returns how many ran.
func (r *Runner) Up(ctx context.Context) (int, error) {
	res, err := r.provider.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("migrate up: %w", err)
	}
	return len(res), nil
}

// Down rolls back the newest n applied migrations and returns how many ran.
func (r *Runner) Down(ctx context.Context, n int) (int, error) {
	done := 0
	for ; done < n; done++ {
		if _, err := r.provider.Down(ctx); err != nil {
			if errors.Is(err, goose.ErrNoNextVersion) {
				break
			}
			return done, fmt.Errorf("migrate down: %w", err)
		}
	}
	return done, nil
}

// Status is the state of one migration.
type Status struct {
	Version int64
	Name    string
	Applied bool
	// AppliedAt is zero when the migration is pending.
	AppliedAt string
}

// Status lists every migration with whether it is applied.
func (r *Runner) Status(ctx context.Context) ([]Status, error) {
	st, err := r.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	migs, _ := All()
	names := map[int64]string{}
	for _, m := range migs {
		names[m.Version] = m.Name
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		row := Status{Version: s.Source.Version, Name: names[s.Source.Version], Applied: s.State == goose.StateApplied}
		if row.Applied {
			row.AppliedAt = s.AppliedAt.UTC().Format("2006-01-02 15:04:05Z")
		}
		out = append(out, row)
	}
	return out, nil
}

// Current reports whether the database is at the newest embedded version. The error says why not.
func (r *Runner) Current(ctx context.Context) error {
	v, err := r.provider.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v != r.latest {
		return fmt.Errorf("schema at version %d, binary expects %d: run `console migrate up`", v, r.latest)
	}
	return nil
}
