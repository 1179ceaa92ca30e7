package rollout

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// AllWorkflows is the kill switch key that blocks new Task starts of every workflow.
const AllWorkflows = "*"

// KillSwitch says whether new Task starts of a workflow are blocked. An error means the switch
// could not be read: callers must fail safe and treat it as engaged (Router does). A later
// OpenFeature provider implements the same interface.
type KillSwitch interface {
	Engaged(ctx context.Context, workflow string) (bool, error)
}

// PGKillSwitch is the kill switch kept in Postgres: a row per workflow, AllWorkflows for every
// workflow.
type PGKillSwitch struct{ pool *pgxpool.Pool }

// NewPGKillSwitch returns the Postgres kill switch on pool.
func NewPGKillSwitch(pool *pgxpool.Pool) *PGKillSwitch { return &PGKillSwitch{pool: pool} }

// Engaged reports whether the workflow's switch or the global one is engaged.
func (k *PGKillSwitch) Engaged(ctx context.Context, workflow string) (bool, error) {
	var engaged bool
	err := k.pool.QueryRow(ctx, `SELECT coalesce(bool_or(engaged), false) FROM rollout_kill_switches WHERE workflow IN ($1, $2)`,
		workflow, AllWorkflows).Scan(&engaged)
	if err != nil {
		return true, fmt.Errorf("read kill switch of %s: %w", workflow, err)
	}
	return engaged, nil
}

// Set engages or releases the switch of workflow (AllWorkflows for every one).
func (k *PGKillSwitch) Set(ctx context.Context, workflow string, engaged bool, reason, actor string) error {
	_, err := k.pool.Exec(ctx, `
		INSERT INTO rollout_kill_switches (workflow, engaged, reason, actor, updated_at) VALUES ($1, $2, $3, $4, now())
		ON CONFLICT (workflow) DO UPDATE SET engaged = EXCLUDED.engaged, reason = EXCLUDED.reason,
		    actor = EXCLUDED.actor, updated_at = now()`, workflow, engaged, reason, actor)
	if err != nil {
		return fmt.Errorf("set kill switch of %s: %w", workflow, err)
	}
	return nil
}
