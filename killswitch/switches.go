package killswitch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
)

// BoolFlag is a boolean flag declared in code next to its fail-safe default: the value it
// answers when it cannot be evaluated (provider error, missing flag, malformed definition,
// type mismatch).
type BoolFlag struct {
	Key      string
	FailSafe bool
}

// NewTaskStarts says whether a new Task may start. Fail-safe: blocked. Its definition is
// generated from the kill switches: variant "allowed" (true), and one variant per engaged
// switch ("kill-switch:global", "kill-switch:workflow:W", "kill-switch:server:S", all false)
// chosen by targeting on the evaluation context's workflow and server.
var NewTaskStarts = BoolFlag{Key: "new-task-starts", FailSafe: false}

// Scopes of a kill switch.
const (
	ScopeGlobal   = "global"
	ScopeWorkflow = "workflow"
	ScopeServer   = "server"
)

// Switch is one kill switch's state.
type Switch struct {
	Scope, Name   string
	Engaged       bool
	Reason, Actor string
	EngagedAt     *time.Time
	ReleasedAt    *time.Time
	// ReleaseRequestedBy is who asked for a release awaiting approval ("" for none).
	ReleaseRequestedBy, ReleaseRequestedReason string
}

// Variant is the variant of NewTaskStarts that names this switch.
func (s Switch) Variant() string { return SwitchVariant(s.Scope, s.Name) }

// SwitchVariant names the switch of scope and name as a variant of NewTaskStarts.
func SwitchVariant(scope, name string) string {
	if scope == ScopeGlobal {
		return "kill-switch:global"
	}
	return "kill-switch:" + scope + ":" + name
}

// ErrFourEyes is returned when the actor approving a release is the one who asked for it.
var ErrFourEyes = errors.New("killswitch: the release must be approved by someone other than who asked for it")

func checkScope(scope, name string) error {
	switch scope {
	case ScopeGlobal:
		if name != "" {
			return fmt.Errorf("%w: the global switch has no name", ErrInvalid)
		}
	case ScopeWorkflow, ScopeServer:
		if !ValidKey(name) {
			return fmt.Errorf("%w: %s name %q", ErrInvalid, scope, name)
		}
	default:
		return fmt.Errorf("%w: scope must be global, workflow or server, not %q", ErrInvalid, scope)
	}
	return nil
}

// Switches lists every kill switch that was ever set.
func (s *Store) Switches(ctx context.Context) ([]Switch, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT scope, name, engaged, reason, actor, engaged_at, released_at, release_requested_by, release_requested_reason
		FROM kill_switches ORDER BY CASE scope WHEN 'global' THEN 0 WHEN 'workflow' THEN 1 ELSE 2 END, name`)
	if err != nil {
		return nil, fmt.Errorf("kill switches: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Switch, error) {
		var w Switch
		err := r.Scan(&w.Scope, &w.Name, &w.Engaged, &w.Reason, &w.Actor, &w.EngagedAt, &w.ReleasedAt,
			&w.ReleaseRequestedBy, &w.ReleaseRequestedReason)
		return w, err
	})
}

// Engage engages a kill switch: from the commit on, every replica refuses new Task starts it
// covers. Tasks already running are not touched.
func (s *Store) Engage(ctx context.Context, actor audit.Actor, scope, name, reason string) error {
	if err := checkScope(scope, name); err != nil {
		return err
	}
	reason, err := checkReason(reason)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO kill_switches (scope, name, engaged, reason, actor, engaged_at) VALUES ($1, $2, true, $3, $4, now())
			ON CONFLICT (scope, name) DO UPDATE SET engaged = true, reason = EXCLUDED.reason, actor = EXCLUDED.actor,
			    engaged_at = CASE WHEN kill_switches.engaged THEN kill_switches.engaged_at ELSE now() END,
			    release_requested_by = '', release_requested_reason = '', release_requested_at = NULL`,
			scope, name, reason, actor.Name); err != nil {
			return fmt.Errorf("engage %s: %w", SwitchVariant(scope, name), err)
		}
		return regenerate(ctx, tx, actor, reason, "killswitch.engage", SwitchVariant(scope, name))
	})
}

// Release releases a switch. With fourEyes, the first call only records the request; Approve by
// someone else completes it.
func (s *Store) Release(ctx context.Context, actor audit.Actor, scope, name, reason string, fourEyes bool) (pending bool, err error) {
	if err := checkScope(scope, name); err != nil {
		return false, err
	}
	if reason, err = checkReason(reason); err != nil {
		return false, err
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var engaged bool
		err := tx.QueryRow(ctx, `SELECT engaged FROM kill_switches WHERE scope = $1 AND name = $2 FOR UPDATE`, scope, name).Scan(&engaged)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !engaged) {
			return fmt.Errorf("%s is not engaged: %w", SwitchVariant(scope, name), ErrNotFound)
		}
		if err != nil {
			return err
		}
		if fourEyes {
			pending = true
			if _, err := tx.Exec(ctx, `UPDATE kill_switches SET release_requested_by = $3, release_requested_reason = $4,
				release_requested_at = now() WHERE scope = $1 AND name = $2`, scope, name, actor.Name, reason); err != nil {
				return err
			}
			return audit.Record(ctx, tx, audit.Entry{Actor: actor, Action: "killswitch.release_request",
				Target: SwitchVariant(scope, name), Reason: reason})
		}
		return release(ctx, tx, actor, scope, name, reason)
	})
	return pending, err
}

// Approve completes a release someone else asked for.
func (s *Store) Approve(ctx context.Context, actor audit.Actor, scope, name, reason string) error {
	if err := checkScope(scope, name); err != nil {
		return err
	}
	reason, err := checkReason(reason)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var by, asked string
		err := tx.QueryRow(ctx, `SELECT release_requested_by, release_requested_reason FROM kill_switches
			WHERE scope = $1 AND name = $2 AND engaged FOR UPDATE`, scope, name).Scan(&by, &asked)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && by == "") {
			return fmt.Errorf("no release of %s awaits approval: %w", SwitchVariant(scope, name), ErrNotFound)
		}
		if err != nil {
			return err
		}
		if by == actor.Name {
			return ErrFourEyes
		}
		return release(ctx, tx, actor, scope, name, asked+" (asked by "+by+"; approved: "+reason+")")
	})
}

func release(ctx context.Context, tx pgx.Tx, actor audit.Actor, scope, name, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE kill_switches SET engaged = false, released_at = now(), reason = $3, actor = $4,
		release_requested_by = '', release_requested_reason = '', release_requested_at = NULL
		WHERE scope = $1 AND name = $2`, scope, name, reason, actor.Name); err != nil {
		return fmt.Errorf("release %s: %w", SwitchVariant(scope, name), err)
	}
	return regenerate(ctx, tx, actor, reason, "killswitch.release", SwitchVariant(scope, name))
}

// regenerate rewrites NewTaskStarts from the engaged switches, within tx.
func regenerate(ctx context.Context, tx pgx.Tx, actor audit.Actor, reason, action, target string) error {
	rows, err := tx.Query(ctx, `SELECT scope, name FROM kill_switches WHERE engaged
		ORDER BY CASE scope WHEN 'global' THEN 0 WHEN 'workflow' THEN 1 ELSE 2 END, name`)
	if err != nil {
		return err
	}
	var engaged []Switch
	for rows.Next() {
		var w Switch
		if err := rows.Scan(&w.Scope, &w.Name); err != nil {
			return err
		}
		engaged = append(engaged, w)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	f := StartsFlag(engaged)
	if err := putFlagAs(ctx, tx, actor, NewTaskStarts.Key, &f, reason, action, target); err != nil {
		return err
	}
	return nil
}

// StartsFlag is the definition of NewTaskStarts with the given switches engaged, in order.
func StartsFlag(engaged []Switch) Flag {
	def := "allowed"
	f := Flag{State: StateEnabled, Variants: map[string]any{"allowed": true}, DefaultVariant: &def, Targeting: json.RawMessage(`{}`)}
	if len(engaged) == 0 {
		return f
	}
	var chain []any
	for _, w := range engaged {
		var cond any = true
		if w.Scope != ScopeGlobal {
			cond = map[string]any{"==": []any{map[string]any{"var": w.Scope}, w.Name}}
		}
		chain = append(chain, cond, w.Variant())
		f.Variants[w.Variant()] = false
	}
	chain = append(chain, "allowed")
	f.Targeting, _ = json.Marshal(map[string]any{"if": chain})
	return f
}
