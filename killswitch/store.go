package killswitch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
)

// Channel is the Postgres NOTIFY channel a flag change signals on; the payload is the change's
// history id.
const Channel = "taskgate_flags"

// MaxReason bounds the reason given for a change.
const MaxReason = 500

// ErrNotFound is returned for a flag, history entry or switch that does not exist.
var ErrNotFound = errors.New("killswitch: not found")

// Store keeps flags, their history and the kill switches in PostgreSQL.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns the store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Load reads every flag and evaluator and the latest change id.
func (s *Store) Load(ctx context.Context) (*Snapshot, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, fmt.Errorf("load flags: %w", err)
	}
	defer tx.Rollback(ctx)
	flags := map[string]Flag{}
	rows, err := tx.Query(ctx, `SELECT key, definition FROM flags`)
	if err != nil {
		return nil, fmt.Errorf("load flags: %w", err)
	}
	for rows.Next() {
		var key string
		var def []byte
		if err := rows.Scan(&key, &def); err != nil {
			return nil, fmt.Errorf("load flags: %w", err)
		}
		f, err := ParseFlag(key, def)
		if err != nil {
			// A malformed stored definition is kept so evaluating it answers a parse error
			// (and callers fail safe), not the last good copy.
			f = Flag{State: "MALFORMED"}
		}
		flags[key] = f
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load flags: %w", err)
	}
	evaluators := map[string]json.RawMessage{}
	rows, err = tx.Query(ctx, `SELECT name, definition FROM flag_evaluators`)
	if err != nil {
		return nil, fmt.Errorf("load evaluators: %w", err)
	}
	for rows.Next() {
		var name string
		var def []byte
		if err := rows.Scan(&name, &def); err != nil {
			return nil, fmt.Errorf("load evaluators: %w", err)
		}
		evaluators[name] = def
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load evaluators: %w", err)
	}
	var version int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM flag_history`).Scan(&version); err != nil {
		return nil, fmt.Errorf("load flags: %w", err)
	}
	return newSnapshot(flags, evaluators, version), nil
}

func checkReason(reason string) (string, error) {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return "", fmt.Errorf("%w: a reason is required", ErrInvalid)
	}
	if len(reason) > MaxReason {
		return "", fmt.Errorf("%w: the reason is longer than %d bytes", ErrInvalid, MaxReason)
	}
	return reason, nil
}

// PutFlag creates or replaces a flag, keeping the change in its history and the audit log, and
// signals every replica.
func (s *Store) PutFlag(ctx context.Context, actor audit.Actor, key string, f Flag, reason string) error {
	reason, err := checkReason(reason)
	if err != nil {
		return err
	}
	if err := f.Validate(key); err != nil {
		return err
	}
	if key == NewTaskStarts.Key {
		return fmt.Errorf("%w: %s is generated from the kill switches; engage or release a switch instead", ErrInvalid, key)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return putFlag(ctx, tx, actor, key, &f, reason, "flag.change")
	})
}

// DeleteFlag removes a flag (kept in its history).
func (s *Store) DeleteFlag(ctx context.Context, actor audit.Actor, key, reason string) error {
	reason, err := checkReason(reason)
	if err != nil {
		return err
	}
	if key == NewTaskStarts.Key {
		return fmt.Errorf("%w: %s cannot be deleted", ErrInvalid, key)
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return putFlag(ctx, tx, actor, key, nil, reason, "flag.delete")
	})
}

// putFlag writes f (nil deletes) with its history row, audit entry and notification.
func putFlag(ctx context.Context, tx pgx.Tx, actor audit.Actor, key string, f *Flag, reason, action string) error {
	return putFlagAs(ctx, tx, actor, key, f, reason, action, "flag:"+key)
}

// putFlagAs is putFlag with the audit entry's target given.
func putFlagAs(ctx context.Context, tx pgx.Tx, actor audit.Actor, key string, f *Flag, reason, action, target string) error {
	var before []byte
	err := tx.QueryRow(ctx, `SELECT definition FROM flags WHERE key = $1 FOR UPDATE`, key).Scan(&before)
	if errors.Is(err, pgx.ErrNoRows) {
		before = nil
	} else if err != nil {
		return fmt.Errorf("flag %s: %w", key, err)
	}
	var after []byte
	if f != nil {
		if after, err = json.Marshal(f); err != nil {
			return fmt.Errorf("flag %s: %w", key, err)
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO flags (key, definition, updated_by, updated_at) VALUES ($1, $2, $3, now())
			ON CONFLICT (key) DO UPDATE SET definition = EXCLUDED.definition, updated_by = EXCLUDED.updated_by, updated_at = now()`,
			key, after, actor.Name); err != nil {
			return fmt.Errorf("flag %s: %w", key, err)
		}
	} else {
		if before == nil {
			return fmt.Errorf("flag %s: %w", key, ErrNotFound)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM flags WHERE key = $1`, key); err != nil {
			return fmt.Errorf("flag %s: %w", key, err)
		}
	}
	var id int64
	if err := tx.QueryRow(ctx, `INSERT INTO flag_history (key, before, after, actor, reason) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
		key, nullJSON(before), nullJSON(after), actor.Name, reason).Scan(&id); err != nil {
		return fmt.Errorf("flag %s history: %w", key, err)
	}
	if err := audit.Record(ctx, tx, audit.Entry{Actor: actor, Action: action, Target: target,
		Before: rawOrNil(before), After: rawOrNil(after), Reason: reason}); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, Channel, fmt.Sprint(id)); err != nil {
		return fmt.Errorf("flag %s notify: %w", key, err)
	}
	return nil
}

func nullJSON(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}

func rawOrNil(b []byte) any {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

// Import replaces the flags and evaluators named in doc (others are left alone), as one change
// per flag.
func (s *Store) Import(ctx context.Context, actor audit.Actor, doc Document, reason string) (int, error) {
	reason, err := checkReason(reason)
	if err != nil {
		return 0, err
	}
	n := 0
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for _, name := range sortedKeys(doc.Evaluators) {
			if _, err := tx.Exec(ctx, `
				INSERT INTO flag_evaluators (name, definition, updated_by) VALUES ($1, $2, $3)
				ON CONFLICT (name) DO UPDATE SET definition = EXCLUDED.definition, updated_by = EXCLUDED.updated_by, updated_at = now()`,
				name, []byte(doc.Evaluators[name]), actor.Name); err != nil {
				return fmt.Errorf("evaluator %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO flag_history (kind, key, after, actor, reason) VALUES ('evaluator', $1, $2, $3, $4)`,
				name, []byte(doc.Evaluators[name]), actor.Name, reason); err != nil {
				return fmt.Errorf("evaluator %s: %w", name, err)
			}
		}
		for _, key := range sortedKeys(doc.Flags) {
			if key == NewTaskStarts.Key {
				continue // generated from the kill switches
			}
			f := doc.Flags[key]
			if err := putFlag(ctx, tx, actor, key, &f, reason, "flag.import"); err != nil {
				return err
			}
			n++
		}
		_, err := tx.Exec(ctx, `SELECT pg_notify($1, 'import')`, Channel)
		return err
	})
	return n, err
}

// Change is one entry of a flag's history.
type Change struct {
	ID            int64
	Kind, Key     string
	Before, After json.RawMessage
	Actor, Reason string
	At            time.Time
}

// History lists a flag's changes, newest first (every flag's when key is "").
func (s *Store) History(ctx context.Context, key string, limit int) ([]Change, error) {
	if limit <= 0 || limit > 500 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `
		SELECT id, kind, key, before, after, actor, reason, at FROM flag_history
		WHERE $1 = '' OR key = $1 ORDER BY id DESC LIMIT $2`, key, limit)
	if err != nil {
		return nil, fmt.Errorf("flag history: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Change, error) {
		var c Change
		err := r.Scan(&c.ID, &c.Kind, &c.Key, &c.Before, &c.After, &c.Actor, &c.Reason, &c.At)
		return c, err
	})
}

// Revert puts a flag back to the definition it had before change id, as one audited change.
func (s *Store) Revert(ctx context.Context, actor audit.Actor, id int64, reason string) error {
	reason, err := checkReason(reason)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var key, kind string
		var before []byte
		err := tx.QueryRow(ctx, `SELECT key, kind, before FROM flag_history WHERE id = $1`, id).Scan(&key, &kind, &before)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("change %d: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("change %d: %w", id, err)
		}
		if kind != "flag" || key == NewTaskStarts.Key {
			return fmt.Errorf("%w: change %d cannot be reverted here", ErrInvalid, id)
		}
		why := fmt.Sprintf("revert of change %d: %s", id, reason)
		if before == nil {
			return putFlag(ctx, tx, actor, key, nil, why, "flag.revert")
		}
		f, err := ParseFlag(key, before)
		if err != nil {
			return err
		}
		return putFlag(ctx, tx, actor, key, &f, why, "flag.revert")
	})
}

// Diff gives the lines that differ between two definitions, "-" before and "+" after, from
// their indented JSON.
func Diff(before, after json.RawMessage) []string {
	a, b := indentLines(before), indentLines(after)
	// Longest common subsequence over lines (definitions are small).
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out []string
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			out = append(out, "  "+a[i])
			i, j = i+1, j+1
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			out = append(out, "+ "+b[j])
			j++
		default:
			out = append(out, "- "+a[i])
			i++
		}
	}
	return out
}

func indentLines(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return strings.Split(string(raw), "\n")
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return strings.Split(string(b), "\n")
}
