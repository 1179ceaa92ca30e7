package operations

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Beat records that replica is alive and that its leases may be taken over once it has not
// beaten for staleAfter. A replica beats well inside staleAfter; rows of replicas gone for a
// day are removed on the way.
func (s *Store) Beat(ctx context.Context, replica string, staleAfter time.Duration) error {
	if replica == "" || staleAfter <= 0 {
		return fmt.Errorf("beat: replica %q and a positive timeout are required", replica)
	}
	// One statement, one round trip: a replica beats every second or so, all day.
	if _, err := s.pool.Exec(ctx, `WITH beat AS (INSERT INTO watcher_replicas (replica, stale_after_ms) VALUES ($1, $2)
			ON CONFLICT (replica) DO UPDATE SET beat_at = now(), stale_after_ms = excluded.stale_after_ms RETURNING replica)
		DELETE FROM watcher_replicas WHERE beat_at < now() - interval '1 day' AND replica NOT IN (SELECT replica FROM beat)`,
		replica, staleAfter.Milliseconds()); err != nil {
		return fmt.Errorf("beat of replica %s: %w", replica, err)
	}
	return nil
}

// Retire removes replica's heartbeat (a clean stop; its leases are released separately).
func (s *Store) Retire(ctx context.Context, replica string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM watcher_replicas WHERE replica = $1`, replica); err != nil {
		return fmt.Errorf("retire replica %s: %w", replica, err)
	}
	return nil
}

// Replica is a watcher replica as its heartbeats show it.
type Replica struct {
	Name       string        `json:"name"`
	StartedAt  time.Time     `json:"started_at"`
	BeatAt     time.Time     `json:"beat_at"`
	StaleAfter time.Duration `json:"stale_after"`
	Alive      bool          `json:"alive"`
}

// Replicas lists the replicas that beat within the last day, newest beat first.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	rows, err := s.pool.Query(ctx, `SELECT replica, started_at, beat_at, stale_after_ms,
		beat_at + stale_after_ms * interval '1 millisecond' >= now() FROM watcher_replicas ORDER BY beat_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	defer rows.Close()
	var out []Replica
	for rows.Next() {
		var r Replica
		var ms int64
		if err := rows.Scan(&r.Name, &r.StartedAt, &r.BeatAt, &ms, &r.Alive); err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		r.StaleAfter = time.Duration(ms) * time.Millisecond
		out = append(out, r)
	}
	return out, rows.Err()
}

// Violation kinds.
const (
	// ViolationTransition is a status change the task state machine forbids.
	ViolationTransition = "transition"
	// ViolationTaskIDChanged is an answer to a read of one task that names another.
	ViolationTaskIDChanged = "task_id_changed"
)

// ViolationRecord is one violation to record.
type ViolationRecord struct {
	// Kind is ViolationTransition or ViolationTaskIDChanged.
	Kind string
	// TaskID is the task id the server's answer named.
	TaskID string
	// From is the stored (or last observed) state, To the status the server reported.
	From, To string
	// Source is SourcePoll or SourceNotification.
	Source string
	// Detail says what was seen, in words.
	Detail string
}

// maxViolationText bounds each text a server put in a violation row.
const maxViolationText = 200

// boundServerText makes server text storable: valid UTF-8, no NUL or control characters,
// cut at a character boundary.
func boundServerText(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '\uFFFD'
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// RecordViolation records a violation the watcher saw outside Observe (an answer for another
// task, a terminal task reported as running again). The stored task is not changed.
func (s *Store) RecordViolation(ctx context.Context, opID string, v ViolationRecord) error {
	if v.Kind == "" {
		v.Kind = ViolationTransition
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO transition_violations (operation_id, task_id, from_state, to_state, source, kind, detail)
		VALUES ($1,$2,$3,$4,$5,$6,$7)`, opID, boundServerText(v.TaskID, maxViolationText), v.From, boundServerText(v.To, 40), v.Source,
		v.Kind, boundServerText(v.Detail, maxViolationText)); err != nil {
		return fmt.Errorf("record violation of %s: %w", opID, err)
	}
	return nil
}
