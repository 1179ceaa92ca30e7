package killswitch

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/rollout"
)

// CanaryFlag is the definition of a workflow's canary flag at percent (0-100): variants
// "task" (true) and "incumbent" (false), default incumbent, targeting
// {"fractional": [["task", percent], ["incumbent", 100-percent]]} over the targeting key (the
// tenant), so flagd given the same document puts the same tenants in the canary.
func CanaryFlag(workflow string, percent int) Flag {
	percent = min(max(percent, 0), 100)
	def := rollout.CanaryIncumbent
	t, _ := json.Marshal(map[string]any{"fractional": []any{
		[]any{rollout.CanaryTask, percent}, []any{rollout.CanaryIncumbent, 100 - percent}}})
	return Flag{State: StateEnabled, DefaultVariant: &def, Targeting: t,
		Variants: map[string]any{rollout.CanaryTask: true, rollout.CanaryIncumbent: false},
		Metadata: map[string]any{"workflow": workflow, "percent": percent, "managedBy": "rollout"}}
}

// PutCanaryTx writes the workflow's canary flag at percent inside the caller's transaction
// (the rollout move that changes the percent), with its history, audit entry and the
// notification that refreshes every replica when the transaction commits.
func (s *Store) PutCanaryTx(ctx context.Context, tx pgx.Tx, actor audit.Actor, workflow string, percent int, reason string) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("%w: canary percent %d (want 0 to 100)", ErrInvalid, percent)
	}
	key := rollout.CanaryFlagKey(workflow)
	f := CanaryFlag(workflow, percent)
	if err := f.Validate(key); err != nil {
		return err
	}
	return putFlag(ctx, tx, actor, key, &f, reason, "flag.change")
}

// PutCanaryTx is Store.PutCanaryTx (rollout.CanaryWriter).
func (s *Service) PutCanaryTx(ctx context.Context, tx pgx.Tx, actor audit.Actor, workflow string, percent int, reason string) error {
	return s.store.PutCanaryTx(ctx, tx, actor, workflow, percent, reason)
}

// CanaryVariant evaluates the workflow's canary flag for tenant from memory
// (rollout.CanaryFlags). ok is false when the flag is not defined or did not give one of the
// two canary variants.
func (s *Service) CanaryVariant(workflow, tenant string) (string, bool) {
	r := s.Evaluate(rollout.CanaryFlagKey(workflow), map[string]any{"targetingKey": tenant, "tenant": tenant, "workflow": workflow})
	if r.ErrorCode != "" || r.NoValue {
		return "", false
	}
	switch r.Variant {
	case rollout.CanaryTask, rollout.CanaryIncumbent:
		return r.Variant, true
	}
	return "", false
}
