package manifests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Trigger says why a probe ran.
type Trigger string

// Probe triggers.
const (
	TriggerStart    Trigger = "start"
	TriggerSchedule Trigger = "schedule"
	TriggerOperator Trigger = "operator"
	TriggerCLI      Trigger = "cli"
)

// Probe is who asked for a probe and why.
type Probe struct {
	// Trigger is why the probe ran.
	Trigger Trigger
	// Actor is the person who asked ("" for the scheduler).
	Actor string
}

// Version is one stored version of a server's manifest.
type Version struct {
	// ID identifies the version.
	ID int64 `json:"id"`
	// Server is the configured server name.
	Server string `json:"server"`
	// Fingerprint is the hex SHA-256 of the canonical form.
	Fingerprint string `json:"fingerprint"`
	// PreviousID is the version this one replaced (0 for the first).
	PreviousID int64 `json:"previousId,omitempty"`
	// FirstSeen and LastSeen bound the probes that saw this version.
	FirstSeen time.Time `json:"firstSeen"`
	LastSeen  time.Time `json:"lastSeen"`
	// Manifest is the manifest as first seen.
	Manifest *Manifest `json:"manifest"`
}

// Recorded is what Record did.
type Recorded struct {
	// Version is the server's latest version after the probe.
	Version Version
	// Changed is true when the fingerprint differs from the previous latest version (false
	// for a server's first version).
	Changed bool
	// PreviousFingerprint is the fingerprint replaced ("" when unchanged or first).
	PreviousFingerprint string
	// VoidedVerdicts counts the gate verdicts voided by the change.
	VoidedVerdicts int64
	// PausedWorkflows are the workflows whose promotion the change paused.
	PausedWorkflows []string
}

// ProbeRow is one probe of a server.
type ProbeRow struct {
	At         time.Time `json:"at"`
	OK         bool      `json:"ok"`
	Error      string    `json:"error,omitempty"`
	ManifestID int64     `json:"manifestId,omitempty"`
	Trigger    Trigger   `json:"trigger"`
	Actor      string    `json:"actor,omitempty"`
}

// Status is what is known of a server now.
type Status struct {
	// Server is the configured server name.
	Server string `json:"server"`
	// Latest is the latest version; nil when the server was never probed successfully.
	Latest *Version `json:"latest,omitempty"`
	// LastProbe is the most recent probe; nil when never probed.
	LastProbe *ProbeRow `json:"lastProbe,omitempty"`
	// LastSuccess is when the server last answered a probe (zero when never).
	LastSuccess time.Time `json:"lastSuccess"`
}

// Reachable reports whether the most recent probe succeeded.
func (s Status) Reachable() bool { return s.LastProbe != nil && s.LastProbe.OK }

// Store keeps manifests, their history and the probes in Postgres.
type Store struct{ pool *pgxpool.Pool }

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Record stores a successful probe of m.Server. When the fingerprint differs from the server's
// latest version it adds a version, voids the live gate verdicts of the affected workflows
// (those that run on the server) whose fingerprint is not the new one, and pauses their
// promotion with the reason — all in one transaction.
func (s *Store) Record(ctx context.Context, m *Manifest, p Probe, affected []string) (Recorded, error) {
	var out Recorded
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = s.RecordTx(ctx, tx, m, p, affected)
		return err
	})
	return out, err
}

// RecordTx is Record inside the caller's transaction.
func (s *Store) RecordTx(ctx context.Context, tx pgx.Tx, m *Manifest, p Probe, affected []string) (Recorded, error) {
	var out Recorded
	if m.Server == "" {
		return out, fmt.Errorf("%w: a stored manifest names its server", ErrInvalid)
	}
	canonical, err := m.Canonical()
	if err != nil {
		return out, err
	}
	fp := hashHex(canonical)
	body, err := json.Marshal(m)
	if err != nil {
		return out, fmt.Errorf("encode manifest: %w", err)
	}
	at := m.Session.At
	if at.IsZero() {
		at = time.Now().UTC()
	}
	// One writer per server at a time, so two replicas probing at once agree on the history.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('manifests:' || $1, 0))`, m.Server); err != nil {
		return out, fmt.Errorf("lock manifest history of %s: %w", m.Server, err)
	}
	var prevID int64
	var prevFP string
	err = tx.QueryRow(ctx, `SELECT id, fingerprint FROM manifests WHERE server = $1 ORDER BY id DESC LIMIT 1`, m.Server).Scan(&prevID, &prevFP)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return out, fmt.Errorf("latest manifest of %s: %w", m.Server, err)
	}
	var id int64
	if prevFP == fp {
		id = prevID
		if _, err := tx.Exec(ctx, `UPDATE manifests SET last_seen_at = greatest(last_seen_at, $2) WHERE id = $1`, id, at); err != nil {
			return out, fmt.Errorf("touch manifest %d: %w", id, err)
		}
	} else {
		var prev *int64
		if prevID != 0 {
			prev = &prevID
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO manifests (server, fingerprint, era, protocol_version, server_name, server_version,
			                       body, canonical, previous_id, first_seen_at, last_seen_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10) RETURNING id`,
			m.Server, fp, string(m.Era), m.ProtocolVersion, m.ServerName, m.ServerVersion, body, canonical, prev, at).Scan(&id)
		if err != nil {
			return out, fmt.Errorf("insert manifest of %s: %w", m.Server, err)
		}
		if prevID != 0 {
			out.Changed, out.PreviousFingerprint = true, prevFP
			reason := fmt.Sprintf("manifest of %s changed from %s to %s at %s", m.Server, Short(prevFP), Short(fp), at.UTC().Format(time.RFC3339))
			tag, err := tx.Exec(ctx, `
				UPDATE gate_verdicts SET voided_at = $3, void_reason = $4
				WHERE workflow = ANY($1) AND voided_at IS NULL AND manifest_fingerprint <> $2`,
				affected, fp, at, reason)
			if err != nil {
				return out, fmt.Errorf("void gate verdicts: %w", err)
			}
			out.VoidedVerdicts = tag.RowsAffected()
			for _, w := range affected {
				_, err := tx.Exec(ctx, `
					INSERT INTO workflow_rollouts (workflow, promotion_paused_reason, promotion_paused_at, updated_at, updated_by)
					VALUES ($1, $2, $3, now(), 'manifest-prober')
					ON CONFLICT (workflow) DO UPDATE SET promotion_paused_reason = EXCLUDED.promotion_paused_reason,
					    promotion_paused_at = EXCLUDED.promotion_paused_at, updated_at = now(), updated_by = EXCLUDED.updated_by`,
					w, reason, at)
				if err != nil {
					return out, fmt.Errorf("pause promotion of %s: %w", w, err)
				}
				out.PausedWorkflows = append(out.PausedWorkflows, w)
			}
		}
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO manifest_probes (server, probed_at, ok, manifest_id, session_id_sha256, raw_capabilities_sha256, trigger, actor)
		VALUES ($1, $2, true, $3, $4, $5, $6, $7)`,
		m.Server, at, id, m.Session.SessionIDSHA256, m.Session.RawCapabilitiesSHA256, string(p.Trigger), p.Actor)
	if err != nil {
		return out, fmt.Errorf("record probe of %s: %w", m.Server, err)
	}
	v, err := getVersion(ctx, tx, id)
	if err != nil {
		return out, err
	}
	out.Version = v
	return out, nil
}

// InTx runs fn in one transaction, so a caller can store a probe with its audit row.
func (s *Store) InTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}

// RecordFailure stores a failed probe (server unreachable, handshake refused). The error text
// must not hold secrets; mcpclient errors never carry tokens.
func (s *Store) RecordFailure(ctx context.Context, server string, at time.Time, probeErr error, p Probe) error {
	return s.RecordFailureTx(ctx, s.pool, server, at, probeErr, p)
}

// Execer is a pool or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// RecordFailureTx is RecordFailure on the caller's transaction (or pool).
func (s *Store) RecordFailureTx(ctx context.Context, tx Execer, server string, at time.Time, probeErr error, p Probe) error {
	msg := "probe failed"
	if probeErr != nil {
		msg = probeErr.Error()
	}
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO manifest_probes (server, probed_at, ok, error, trigger, actor) VALUES ($1, $2, false, $3, $4, $5)`,
		server, at.UTC(), msg, string(p.Trigger), p.Actor)
	if err != nil {
		return fmt.Errorf("record failed probe of %s: %w", server, err)
	}
	return nil
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

const versionCols = `id, server, fingerprint, coalesce(previous_id, 0), first_seen_at, last_seen_at, body`

func scanVersion(row pgx.Row) (Version, error) {
	var v Version
	var body []byte
	if err := row.Scan(&v.ID, &v.Server, &v.Fingerprint, &v.PreviousID, &v.FirstSeen, &v.LastSeen, &body); err != nil {
		return v, err
	}
	m, err := Parse(body)
	if err != nil {
		return v, fmt.Errorf("stored manifest %d: %w", v.ID, err)
	}
	v.Manifest = m
	return v, nil
}

func getVersion(ctx context.Context, q querier, id int64) (Version, error) {
	v, err := scanVersion(q.QueryRow(ctx, `SELECT `+versionCols+` FROM manifests WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("manifest %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("manifest %d: %w", id, err)
	}
	return v, nil
}

// Get returns one version by id.
func (s *Store) Get(ctx context.Context, id int64) (Version, error) {
	return getVersion(ctx, s.pool, id)
}

// Latest returns the server's latest version.
func (s *Store) Latest(ctx context.Context, server string) (Version, error) {
	v, err := scanVersion(s.pool.QueryRow(ctx, `SELECT `+versionCols+` FROM manifests WHERE server = $1 ORDER BY id DESC LIMIT 1`, server))
	if errors.Is(err, pgx.ErrNoRows) {
		return v, fmt.Errorf("latest manifest of %s: %w", server, ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("latest manifest of %s: %w", server, err)
	}
	return v, nil
}

// History returns the server's versions, newest first, at most limit (default 50) with an id
// below before (0 = from the newest): keyset pagination.
func (s *Store) History(ctx context.Context, server string, before int64, limit int) ([]Version, error) {
	if limit <= 0 || limit > 500 {
		limit = 50
	}
	rows, err := s.pool.Query(ctx, `SELECT `+versionCols+` FROM manifests
		WHERE server = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, server, before, limit)
	if err != nil {
		return nil, fmt.Errorf("manifest history of %s: %w", server, err)
	}
	defer rows.Close()
	var out []Version
	for rows.Next() {
		v, err := scanVersion(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("manifest history of %s: %w", server, err)
	}
	return out, nil
}

// Status returns what is known of the server now: latest version, last probe, last success.
func (s *Store) Status(ctx context.Context, server string) (Status, error) {
	st := Status{Server: server}
	v, err := s.Latest(ctx, server)
	switch {
	case err == nil:
		st.Latest = &v
	case !errors.Is(err, ErrNotFound):
		return st, err
	}
	var p ProbeRow
	var mid *int64
	var trig string
	err = s.pool.QueryRow(ctx, `SELECT probed_at, ok, error, manifest_id, trigger, actor FROM manifest_probes
		WHERE server = $1 ORDER BY id DESC LIMIT 1`, server).Scan(&p.At, &p.OK, &p.Error, &mid, &trig, &p.Actor)
	switch {
	case err == nil:
		p.Trigger = Trigger(trig)
		if mid != nil {
			p.ManifestID = *mid
		}
		st.LastProbe = &p
	case !errors.Is(err, pgx.ErrNoRows):
		return st, fmt.Errorf("last probe of %s: %w", server, err)
	}
	err = s.pool.QueryRow(ctx, `SELECT probed_at FROM manifest_probes WHERE server = $1 AND ok ORDER BY id DESC LIMIT 1`, server).Scan(&st.LastSuccess)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("last successful probe of %s: %w", server, err)
	}
	return st, nil
}

// Probes returns the server's most recent probes, newest first (at most limit, default 20).
func (s *Store) Probes(ctx context.Context, server string, limit int) ([]ProbeRow, error) {
	if limit <= 0 || limit > 500 {
		limit = 20
	}
	rows, err := s.pool.Query(ctx, `SELECT probed_at, ok, error, coalesce(manifest_id, 0), trigger, actor FROM manifest_probes
		WHERE server = $1 ORDER BY id DESC LIMIT $2`, server, limit)
	if err != nil {
		return nil, fmt.Errorf("probes of %s: %w", server, err)
	}
	defer rows.Close()
	var out []ProbeRow
	for rows.Next() {
		var p ProbeRow
		var trig string
		if err := rows.Scan(&p.At, &p.OK, &p.Error, &p.ManifestID, &trig, &p.Actor); err != nil {
			return nil, fmt.Errorf("probes of %s: %w", server, err)
		}
		p.Trigger = Trigger(trig)
		out = append(out, p)
	}
	return out, rows.Err()
}
