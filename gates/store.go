package gates

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store keeps gate runs, their cases and the repeat queue in PostgreSQL.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns a store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

func notFound(what string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return err
}

// Summary is a stored run without its cases.
type Summary struct {
	ID int64 `json:"id"`
	Binding
	StartedBy     string            `json:"started_by"`
	Era           string            `json:"era"`
	ServerName    string            `json:"server_name"`
	ServerVersion string            `json:"server_version"`
	Verdict       Verdict           `json:"verdict"`
	HardFailures  []string          `json:"hard_failures"`
	Passed        int               `json:"passed"`
	Failed        int               `json:"failed"`
	Inconclusive  int               `json:"inconclusive"`
	Error         string            `json:"error,omitempty"`
	Started       time.Time         `json:"started"`
	Finished      time.Time         `json:"finished"`
	VoidedAt      *time.Time        `json:"voided_at,omitempty"`
	VoidedReason  string            `json:"voided_reason,omitempty"`
	DeviationDiff []DeviationChange `json:"deviation_diff"`
}

// Stored is a run with its cases as stored.
type Stored struct {
	Summary
	Deviations Deviations `json:"deviations"`
	Cases      []Case     `json:"cases"`
}

// Save stores a decided run with its cases. When the server's deviation fingerprint differs
// from its last stored run, the change is kept as the run's diff and every earlier run of
// the server still valid is voided. It returns the run's id and the diff.
func (s *Store) Save(ctx context.Context, r *Run) (int64, []DeviationChange, error) {
	var id int64
	var diff []DeviationChange
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Serialise saves of one server so the diff is taken against the true predecessor.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('gate:' || $1))`, r.Server); err != nil {
			return err
		}
		var prevFP string
		var prevDev []byte
		err := tx.QueryRow(ctx, `SELECT deviation_fingerprint, deviations FROM gate_runs WHERE server = $1 AND error = '' ORDER BY id DESC LIMIT 1`,
			r.Server).Scan(&prevFP, &prevDev)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err == nil && prevFP != r.DeviationFingerprint && r.Error == "" {
			var prev Deviations
			_ = json.Unmarshal(prevDev, &prev)
			diff = DiffDeviations(prev, r.Deviations)
			var parts []string
			for _, c := range diff {
				parts = append(parts, c.Behaviour+": "+c.Before+" → "+c.After)
			}
			reason := inert("deviation fingerprint changed: "+strings.Join(parts, "; "), 1000)
			if _, err := tx.Exec(ctx, `UPDATE gate_runs SET voided_at = now(), voided_reason = $2 WHERE server = $1 AND voided_at IS NULL`,
				r.Server, reason); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE gate_verdicts SET voided_at = now(), void_reason = $2 WHERE server = $1 AND voided_at IS NULL`,
				r.Server, reason); err != nil {
				return err
			}
		}
		if diff == nil {
			diff = []DeviationChange{}
		}
		dev, _ := json.Marshal(r.Deviations)
		dj, _ := json.Marshal(diff)
		pins := r.Pins
		if pins == nil {
			pins = map[string]string{}
		}
		pj, _ := json.Marshal(pins)
		hard := r.HardFailures
		if hard == nil {
			hard = []string{}
		}
		p, f, i := r.Counts()
		if err := tx.QueryRow(ctx, `INSERT INTO gate_runs (workflow, server, started_by, era, server_name, server_version, manifest_fingerprint,
			deviation_fingerprint, deviations, deviation_diff, build, pins, pins_key, verdict, hard_failures, passed, failed, inconclusive, error,
			started_at, finished_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13,$14,$15,$16,$17,$18,$19,$20,$21) RETURNING id`,
			r.Workflow, r.Server, r.StartedBy, r.Era, r.ServerName, r.ServerVersion, r.ManifestFingerprint, r.DeviationFingerprint, dev, dj,
			r.Build, pj, r.PinsKey(), r.Verdict, hard, p, f, i, r.Error, r.Started, r.Finished).Scan(&id); err != nil {
			return fmt.Errorf("insert gate run: %w", err)
		}
		if r.Workflow != "" && r.Error == "" {
			// One verdict per suite in the rollout's verdict table, so promotion and the
			// manifest prober see the run: a suite passes with no failed case and no hard
			// failure anywhere in the run.
			failed, ran := map[Suite]bool{}, map[Suite]bool{}
			for _, c := range r.Cases {
				ran[c.Suite] = ran[c.Suite] || c.Verdict != Inconclusive
				failed[c.Suite] = failed[c.Suite] || c.Verdict == Fail
			}
			ev, _ := json.Marshal(map[string]any{"run_id": id, "deviation_fingerprint": r.DeviationFingerprint, "pins": pins})
			for _, su := range Suites {
				if !ran[su] {
					continue
				}
				if _, err := tx.Exec(ctx, `INSERT INTO gate_verdicts (workflow, server, suite, passed, manifest_fingerprint, build, evidence)
					VALUES ($1,$2,$3,$4,$5,$6,$7)`, r.Workflow, r.Server, su, !failed[su] && len(hard) == 0, r.ManifestFingerprint, r.Build, ev); err != nil {
					return fmt.Errorf("insert gate verdict: %w", err)
				}
			}
		}
		for pos, c := range r.Cases {
			ev, _ := json.Marshal(c.Evidence)
			if _, err := tx.Exec(ctx, `INSERT INTO gate_cases (run_id, position, suite, name, verdict, hard, reason, started_at, duration_ms, evidence)
				VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)`, id, pos, c.Suite, c.Name, c.Verdict, c.Hard, c.Reason, c.Started, c.Duration.Milliseconds(), ev); err != nil {
				return fmt.Errorf("insert gate case: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	r.ID = id
	return id, diff, nil
}

const summaryCols = `id, workflow, server, started_by, era, server_name, server_version, manifest_fingerprint, deviation_fingerprint,
	build, pins, verdict, hard_failures, passed, failed, inconclusive, error, started_at, finished_at, voided_at, voided_reason, deviation_diff`

func scanSummary(row pgx.Row) (Summary, error) {
	var s Summary
	var pins, diff []byte
	err := row.Scan(&s.ID, &s.Workflow, &s.Server, &s.StartedBy, &s.Era, &s.ServerName, &s.ServerVersion, &s.ManifestFingerprint,
		&s.DeviationFingerprint, &s.Build, &pins, &s.Verdict, &s.HardFailures, &s.Passed, &s.Failed, &s.Inconclusive, &s.Error,
		&s.Started, &s.Finished, &s.VoidedAt, &s.VoidedReason, &diff)
	if err != nil {
		return s, err
	}
	_ = json.Unmarshal(pins, &s.Pins)
	_ = json.Unmarshal(diff, &s.DeviationDiff)
	return s, nil
}

// Get returns a stored run with its cases.
func (s *Store) Get(ctx context.Context, id int64) (*Stored, error) {
	sum, err := scanSummary(s.pool.QueryRow(ctx, `SELECT `+summaryCols+` FROM gate_runs WHERE id = $1`, id))
	if err != nil {
		return nil, notFound(fmt.Sprintf("gate run %d", id), err)
	}
	out := &Stored{Summary: sum}
	var dev []byte
	if err := s.pool.QueryRow(ctx, `SELECT deviations FROM gate_runs WHERE id = $1`, id).Scan(&dev); err != nil {
		return nil, err
	}
	_ = json.Unmarshal(dev, &out.Deviations)
	rows, err := s.pool.Query(ctx, `SELECT suite, name, verdict, hard, reason, started_at, duration_ms, evidence FROM gate_cases
		WHERE run_id = $1 ORDER BY position`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var c Case
		var ms int64
		var ev []byte
		if err := rows.Scan(&c.Suite, &c.Name, &c.Verdict, &c.Hard, &c.Reason, &c.Started, &ms, &ev); err != nil {
			return nil, err
		}
		c.Duration = time.Duration(ms) * time.Millisecond
		_ = json.Unmarshal(ev, &c.Evidence)
		out.Cases = append(out.Cases, c)
	}
	return out, rows.Err()
}

// Filter selects runs for List.
type Filter struct {
	// Server and Workflow narrow the list ("" = any).
	Server, Workflow string
	// Before is the keyset cursor: only runs with a smaller id (0 = from the newest).
	Before int64
	// Limit bounds the page (default 50, at most 200).
	Limit int
}

// List returns runs, newest first.
func (s *Store) List(ctx context.Context, f Filter) ([]Summary, error) {
	if f.Limit <= 0 || f.Limit > 200 {
		f.Limit = 50
	}
	rows, err := s.pool.Query(ctx, `SELECT `+summaryCols+` FROM gate_runs
		WHERE ($1 = '' OR server = $1) AND ($2 = '' OR workflow = $2) AND ($3 = 0 OR id < $3) ORDER BY id DESC LIMIT $4`,
		f.Server, f.Workflow, f.Before, f.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Summary
	for rows.Next() {
		sum, err := scanSummary(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sum)
	}
	return out, rows.Err()
}

// Pool returns the store's pool (for callers that combine gate reads with their own).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }
