package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/config"
)

// State is a workflow's rollout state.
type State struct {
	// Workflow is the workflow name.
	Workflow string `json:"workflow"`
	// Stage is the stage in force.
	Stage Stage `json:"stage"`
	// CanaryPercent is the share of buckets inside the canary (used in the canary stage).
	CanaryPercent int `json:"canaryPercent"`
	// Step is the index into the plan's canary steps (set by the controller's moves).
	Step int `json:"step"`
	// FromPolicy is true when no operator has set the stage: the policy file's default applies.
	FromPolicy bool `json:"fromPolicy"`
	// PromotionPausedReason is why promotion is paused ("" = not paused), e.g. a manifest change.
	PromotionPausedReason string `json:"promotionPausedReason,omitempty"`
	// PromotionPausedAt is when promotion was paused.
	PromotionPausedAt time.Time `json:"promotionPausedAt"`
	// UpdatedBy and UpdatedAt name the last change.
	UpdatedBy string    `json:"updatedBy,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Store keeps per-workflow rollout state in Postgres, defaulting from the policy file.
type Store struct {
	pool   *pgxpool.Pool
	policy *config.Config
}

// NewStore returns a Store on pool whose defaults come from policy.
func NewStore(pool *pgxpool.Pool, policy *config.Config) *Store {
	return &Store{pool: pool, policy: policy}
}

// Get returns the workflow's rollout state: the stored stage, or the policy's default.
func (s *Store) Get(ctx context.Context, workflow string) (State, error) {
	w, ok := s.policy.Workflow(workflow)
	if !ok {
		return State{}, fmt.Errorf("rollout state of %s: %w", workflow, ErrUnknownWorkflow)
	}
	st := State{Workflow: workflow, Stage: Stage(w.Stage), CanaryPercent: w.CanaryPercent, FromPolicy: true}
	if st.Stage == "" {
		st.Stage = StageOff
	}
	var stage *string
	var pct *int
	var pausedAt *time.Time
	err := s.pool.QueryRow(ctx, `SELECT stage, canary_percent, step, promotion_paused_reason, promotion_paused_at, updated_by, updated_at
		FROM workflow_rollouts WHERE workflow = $1`, workflow).Scan(&stage, &pct, &st.Step, &st.PromotionPausedReason, &pausedAt, &st.UpdatedBy, &st.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("rollout state of %s: %w", workflow, err)
	}
	if stage != nil {
		st.Stage, st.FromPolicy = Stage(*stage), false
	}
	if pct != nil {
		st.CanaryPercent = *pct
	}
	if pausedAt != nil {
		st.PromotionPausedAt = *pausedAt
	}
	return st, nil
}

// Set records an operator's stage and canary percent for a workflow.
func (s *Store) Set(ctx context.Context, workflow string, stage Stage, canaryPercent int, actor string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.SetTx(ctx, tx, workflow, stage, canaryPercent, actor) })
}

// SetTx is Set inside the caller's transaction (e.g. with an audit row).
func (s *Store) SetTx(ctx context.Context, tx pgx.Tx, workflow string, stage Stage, canaryPercent int, actor string) error {
	if _, ok := s.policy.Workflow(workflow); !ok {
		return fmt.Errorf("set stage of %s: %w", workflow, ErrUnknownWorkflow)
	}
	if _, err := ParseStage(string(stage)); err != nil {
		return err
	}
	if canaryPercent < 0 || canaryPercent > 100 {
		return fmt.Errorf("%w: canary percent %d (want 0 to 100)", ErrInvalidStage, canaryPercent)
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO workflow_rollouts (workflow, stage, canary_percent, updated_at, updated_by) VALUES ($1, $2, $3, now(), $4)
		ON CONFLICT (workflow) DO UPDATE SET stage = EXCLUDED.stage, canary_percent = EXCLUDED.canary_percent,
		    updated_at = now(), updated_by = EXCLUDED.updated_by`, workflow, string(stage), canaryPercent, actor)
	if err != nil {
		return fmt.Errorf("set stage of %s: %w", workflow, err)
	}
	return nil
}

// PausePromotion records why the workflow's promotion is paused.
func (s *Store) PausePromotion(ctx context.Context, workflow, reason, actor string) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO workflow_rollouts (workflow, promotion_paused_reason, promotion_paused_at, updated_at, updated_by)
		VALUES ($1, $2, now(), now(), $3)
		ON CONFLICT (workflow) DO UPDATE SET promotion_paused_reason = EXCLUDED.promotion_paused_reason,
		    promotion_paused_at = now(), updated_at = now(), updated_by = EXCLUDED.updated_by`, workflow, reason, actor)
	if err != nil {
		return fmt.Errorf("pause promotion of %s: %w", workflow, err)
	}
	return nil
}

// ResumePromotion clears the pause (for the gates issue: after fresh passing verdicts).
func (s *Store) ResumePromotion(ctx context.Context, workflow, actor string) error {
	_, err := s.pool.Exec(ctx, `UPDATE workflow_rollouts SET promotion_paused_reason = '', promotion_paused_at = NULL,
		updated_at = now(), updated_by = $2 WHERE workflow = $1`, workflow, actor)
	if err != nil {
		return fmt.Errorf("resume promotion of %s: %w", workflow, err)
	}
	return nil
}

// Verdict is a gate verdict bound to a manifest fingerprint.
type Verdict struct {
	ID                  int64     `json:"id"`
	Workflow            string    `json:"workflow"`
	Server              string    `json:"server"`
	Suite               string    `json:"suite"`
	Passed              bool      `json:"passed"`
	ManifestFingerprint string    `json:"manifestFingerprint"`
	Build               string    `json:"build,omitempty"`
	CreatedAt           time.Time `json:"createdAt"`
	// VoidedAt is set when a manifest change voided the verdict (zero = live).
	VoidedAt   time.Time `json:"voidedAt"`
	VoidReason string    `json:"voidReason,omitempty"`
}

// AddVerdict stores a gate verdict (the gates suites call it; tests use it now).
func (s *Store) AddVerdict(ctx context.Context, v Verdict) (int64, error) {
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO gate_verdicts (workflow, server, suite, passed, manifest_fingerprint, build)
		VALUES ($1, $2, $3, $4, $5, $6) RETURNING id`, v.Workflow, v.Server, v.Suite, v.Passed, v.ManifestFingerprint, v.Build).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("add gate verdict for %s: %w", v.Workflow, err)
	}
	return id, nil
}

// Verdicts lists the workflow's gate verdicts, newest first, voided ones included.
func (s *Store) Verdicts(ctx context.Context, workflow string) ([]Verdict, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, workflow, server, suite, passed, manifest_fingerprint, build, created_at,
		coalesce(voided_at, 'epoch'::timestamptz), void_reason FROM gate_verdicts WHERE workflow = $1 ORDER BY id DESC LIMIT 200`, workflow)
	if err != nil {
		return nil, fmt.Errorf("gate verdicts of %s: %w", workflow, err)
	}
	defer rows.Close()
	var out []Verdict
	for rows.Next() {
		var v Verdict
		if err := rows.Scan(&v.ID, &v.Workflow, &v.Server, &v.Suite, &v.Passed, &v.ManifestFingerprint, &v.Build, &v.CreatedAt, &v.VoidedAt, &v.VoidReason); err != nil {
			return nil, fmt.Errorf("gate verdicts of %s: %w", workflow, err)
		}
		if v.VoidedAt.Equal(time.Unix(0, 0)) {
			v.VoidedAt = time.Time{}
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
