package reconcile

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/audit"
	"github.com/taskgate/taskgate/internal/safetext"
)

// SystemActor is the audit actor of the automatic verifiers.
var SystemActor = audit.Actor{Name: "reconciler", Kind: audit.KindSystem}

// Retrier sends an operation again through the ledger's start path, with the operation's
// idempotency key, so the system of record applies its effect at most once. The operations
// service satisfies it.
type Retrier interface {
	Retry(ctx context.Context, operationID, by string) error
}

// Options configure a Store.
type Options struct {
	// ResolutionReasons extends BuiltinResolutionReasons (the policy's resolution_reasons).
	ResolutionReasons []string
	// Retrier sends retries; nil refuses them.
	Retrier Retrier
}

// Store is the Postgres store of the reconciliation queue: items, claims, resolutions,
// verifications and bulk batches.
type Store struct {
	pool    *pgxpool.Pool
	reasons []string
	retrier Retrier
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool, opts Options) *Store {
	return &Store{pool: pool, reasons: ResolutionReasons(opts.ResolutionReasons), retrier: opts.Retrier}
}

// SetRetrier sets the Retrier after construction (the console wires the operations service
// after the store).
func (s *Store) SetRetrier(r Retrier) { s.retrier = r }

// ResolutionReasons returns the reasons a person may give.
func (s *Store) ResolutionReasons() []string { return slices.Clone(s.reasons) }

// Querier is what OpenTx needs of a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// OpenTx opens a reconciliation item for an operation with reason, inside the caller's
// transaction tx, unless the operation already has an open one. Human handoffs, task-vs-domain
// mismatches and manual verifications (no verifier) go to a person at once; every other reason
// is re-verified automatically first. It reports whether an item was opened and writes an audit row.
func OpenTx(ctx context.Context, tx pgx.Tx, operationID string, reason Reason, detail string) (bool, error) {
	state := StateVerifying
	if reason == ReasonHumanHandoff || reason == ReasonTaskDomainMismatch || reason == ReasonManualVerification {
		state = StateNeedsPerson
	}
	var id, tenant string
	err := tx.QueryRow(ctx, `INSERT INTO reconciliation_items (operation_id, tenant, workflow, reason, detail, state, next_verify_at)
		SELECT o.id, o.tenant, o.workflow, $2, $3, $4, CASE WHEN $4 = 'verifying' THEN now() END FROM operations o WHERE o.id = $1
		ON CONFLICT (operation_id) WHERE closed_at IS NULL DO NOTHING
		RETURNING public_id::text, tenant`, operationID, reason, truncate(detail, 500), state).Scan(&id, &tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open reconciliation item of %s: %w", operationID, err)
	}
	if err := audit.Record(ctx, tx, audit.Entry{Actor: SystemActor, Tenant: tenant, Action: "reconcile.open",
		Target: target(id), After: map[string]any{"operation": operationID, "reason": reason, "state": state},
		Reason: ReasonText(reason)}); err != nil {
		return false, err
	}
	return true, nil
}

func truncate(s string, n int) string {
	s, _ = safetext.Clean(s)
	return safetext.CutPlain(s, n)
}

const itemColumns = `r.id, r.public_id::text, r.operation_id, r.tenant, r.workflow, r.reason, r.detail, r.state, r.attempts, r.next_verify_at,
	r.opened_at, r.closed_at, coalesce(r.claimed_by, ''), r.claimed_at, r.claim_expires_at, coalesce(r.resolution, ''),
	coalesce(r.resolution_reason, ''), coalesce(r.note, ''), coalesce(r.evidence_url, ''), coalesce(r.closed_by, ''),
	(SELECT b.public_id::text FROM reconciliation_batches b WHERE b.id = r.batch_id),
	r.retried_at, coalesce(r.retried_by, ''),
	o.object_ref, o.intended_effect, o.route, o.idempotency_key, o.domain_outcome, coalesce(t.state, ''),
	coalesce(t.tool_error, false), coalesce(o.failure_reason, ''), coalesce(o.failure_reason_by, '')`

const itemFrom = ` FROM reconciliation_items r JOIN operations o ON o.id = r.operation_id LEFT JOIN tasks t ON t.operation_id = r.operation_id`

func scanItem(row pgx.Row) (Item, error) {
	var i Item
	var res string
	err := row.Scan(&i.seq, &i.ID, &i.OperationID, &i.Tenant, &i.Workflow, &i.Reason, &i.Detail, &i.State, &i.Attempts, &i.NextVerifyAt,
		&i.OpenedAt, &i.ClosedAt, &i.ClaimedBy, &i.ClaimedAt, &i.ClaimExpiresAt, &res, &i.ResolutionReason, &i.Note,
		&i.EvidenceURL, &i.ClosedBy, &i.BatchID, &i.RetriedAt, &i.RetriedBy,
		&i.ObjectRef, &i.IntendedEffect, &i.Route, &i.IdempotencyKey, &i.DomainOutcome, &i.TaskState, &i.ToolError, &i.FailureReason, &i.FailureReasonBy)
	i.Resolution = Outcome(res)
	// An expired claim is no claim: nobody holds it.
	if i.ClaimExpiresAt != nil && !i.ClaimExpiresAt.After(time.Now()) {
		i.ClaimedBy, i.ClaimedAt, i.ClaimExpiresAt = "", nil, nil
	}
	return i, err
}

func notFound(id string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("item %s: %w", id, ErrNotFound)
	}
	return fmt.Errorf("item %s: %w", id, err)
}

// Get returns an item if it is in scope. Another tenant's item, an id of the wrong form (an
// old numeric link among them) and a missing item are all ErrNotFound.
func (s *Store) Get(ctx context.Context, scope Scope, id string) (Item, error) {
	if !ValidID(id) {
		return Item{}, fmt.Errorf("item %q: %w", safetext.CutPlain(id, 40), ErrNotFound)
	}
	it, err := scanItem(s.pool.QueryRow(ctx, `SELECT `+itemColumns+itemFrom+` WHERE r.public_id = $1::uuid`, id))
	if err != nil {
		return Item{}, notFound(id, err)
	}
	if !scope.Allows(it.Tenant) {
		return Item{}, fmt.Errorf("item %s: %w", id, ErrNotFound)
	}
	return it, nil
}

// ForOperation returns the newest item of an operation in scope (ErrNotFound when none).
func (s *Store) ForOperation(ctx context.Context, scope Scope, operationID string) (Item, error) {
	it, err := scanItem(s.pool.QueryRow(ctx, `SELECT `+itemColumns+itemFrom+` WHERE r.operation_id = $1 ORDER BY r.id DESC LIMIT 1`, operationID))
	if err != nil || !scope.Allows(it.Tenant) {
		return Item{}, fmt.Errorf("item of operation %s: %w", operationID, ErrNotFound)
	}
	return it, nil
}

// Verifications returns every verifier answer and resolution of an operation, oldest first.
func (s *Store) Verifications(ctx context.Context, scope Scope, operationID string) ([]Verification, error) {
	all, tenants := scope.All, scope.Tenants
	rows, err := s.pool.Query(ctx, `SELECT v.id, coalesce(r.public_id::text, ''), v.source, v.trigger, v.answer, v.receipt, v.detail, v.http_status, v.attempt, v.at
		FROM outcome_verifications v LEFT JOIN reconciliation_items r ON r.id = v.item_id
		WHERE v.operation_id = $1 AND ($2::bool OR v.tenant = ANY($3::text[])) ORDER BY v.id`, operationID, all, tenants)
	if err != nil {
		return nil, fmt.Errorf("verifications of %s: %w", operationID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Verification, error) {
		var v Verification
		var ans string
		err := r.Scan(&v.ID, &v.ItemID, &v.Source, &v.Trigger, &ans, &v.Receipt, &v.Detail, &v.HTTPStatus, &v.Attempt, &v.At)
		v.Answer = Outcome(ans)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("verifications of %s: %w", operationID, err)
	}
	return out, nil
}

// where builds the queue's WHERE clause for f in scope.
func where(scope Scope, f Filter, args *[]any) (string, error) {
	arg := func(v any) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args))
	}
	conds := []string{"(" + arg(scope.All) + "::bool OR r.tenant = ANY(" + arg(scope.Tenants) + "::text[]))"}
	switch f.State {
	case "":
		conds = append(conds, "r.closed_at IS NULL")
	case "closed":
		conds = append(conds, "r.closed_at IS NOT NULL")
	case "all":
	case string(StateVerifying), string(StateNeedsPerson):
		// Open states: saying so lets the queue's partial indexes serve the filter.
		conds = append(conds, "r.closed_at IS NULL", "r.state = "+arg(f.State))
	case string(StateSettled), string(StateResolved):
		conds = append(conds, "r.state = "+arg(f.State))
	default:
		return "", fmt.Errorf("%w: state %q", ErrInvalid, f.State)
	}
	if f.Tenant != "" {
		conds = append(conds, "r.tenant = "+arg(f.Tenant))
	}
	if f.Workflow != "" {
		conds = append(conds, "r.workflow = "+arg(f.Workflow))
	}
	if f.Reason != "" {
		conds = append(conds, "r.reason = "+arg(f.Reason))
	}
	if f.OlderThan > 0 {
		conds = append(conds, "r.opened_at <= now() - "+arg(f.OlderThan.Milliseconds())+" * interval '1 millisecond'")
	}
	switch f.ClaimedBy {
	case "":
	case "nobody":
		conds = append(conds, "(r.claimed_by IS NULL OR r.claim_expires_at <= now())")
	default:
		conds = append(conds, "(r.claimed_by = "+arg(f.ClaimedBy)+" AND r.claim_expires_at > now())")
	}
	return strings.Join(conds, " AND "), nil
}

// List returns a page of the queue in scope, oldest first (keyset on opened_at and the public
// id, so a cursor carries nothing that counts items).
func (s *Store) List(ctx context.Context, scope Scope, f Filter) (Page, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 500)
	q, args, err := listQuery(scope, f)
	if err != nil {
		return Page{}, err
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return Page{}, fmt.Errorf("list reconciliation items: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Item, error) { return scanItem(r) })
	if err != nil {
		return Page{}, fmt.Errorf("list reconciliation items: %w", err)
	}
	p := Page{Items: items}
	if p.Total, err = s.Count(ctx, scope, f); err != nil {
		return Page{}, err
	}
	if len(items) > f.Limit {
		p.Items = items[:f.Limit]
		last := p.Items[f.Limit-1]
		p.Next = base64.RawURLEncoding.EncodeToString([]byte(last.OpenedAt.UTC().Format(time.RFC3339Nano) + "|" + last.ID))
	}
	return p, nil
}

// Count is the real number of items List selects for scope and f over all its pages (f.After
// is ignored): the number the queue, its tile and its bulk preview show.
func (s *Store) Count(ctx context.Context, scope Scope, f Filter) (int, error) {
	var args []any
	w, err := where(scope, f, &args)
	if err != nil {
		return 0, err
	}
	if n, ok, err := s.countOpen(ctx, scope, f); ok || err != nil {
		return n, err
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM reconciliation_items r WHERE `+w, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count reconciliation items: %w", err)
	}
	return n, nil
}

// listQuery is the query of a page of List (f.Limit items and one more) and its arguments.
func listQuery(scope Scope, f Filter) (string, []any, error) {
	var args []any
	w, err := where(scope, f, &args)
	if err != nil {
		return "", nil, err
	}
	if f.After != "" {
		at, id, err := decodeCursor(f.After)
		if err != nil {
			return "", nil, err
		}
		args = append(args, at, id)
		w += fmt.Sprintf(" AND (r.opened_at, r.public_id) > ($%d, $%d::uuid)", len(args)-1, len(args))
	}
	args = append(args, f.Limit+1)
	return `SELECT ` + itemColumns + itemFrom + ` WHERE ` + w + fmt.Sprintf(` ORDER BY r.opened_at, r.public_id LIMIT $%d`, len(args)), args, nil
}

func decodeCursor(c string) (time.Time, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if at, id, ok := strings.Cut(string(b), "|"); ok {
			t, err1 := time.Parse(time.RFC3339Nano, at)
			if err1 == nil && ValidID(id) {
				return t, id, nil
			}
		}
	}
	return time.Time{}, "", fmt.Errorf("%w: bad cursor", ErrInvalid)
}

// lockItem locks an item by its public id in tx and checks scope.
func lockItem(ctx context.Context, tx pgx.Tx, scope Scope, id string) (Item, error) {
	if !ValidID(id) {
		return Item{}, fmt.Errorf("item %q: %w", safetext.CutPlain(id, 40), ErrNotFound)
	}
	it, err := scanItem(tx.QueryRow(ctx, `SELECT `+itemColumns+itemFrom+` WHERE r.public_id = $1::uuid FOR UPDATE OF r`, id))
	if err != nil {
		return Item{}, notFound(id, err)
	}
	if !scope.Allows(it.Tenant) {
		return Item{}, fmt.Errorf("item %s: %w", id, ErrNotFound)
	}
	return it, nil
}

// target is an item's audit target, by its public id.
func target(id string) string { return "reconciliation:" + id }

func claimView(it Item) map[string]any {
	return map[string]any{"state": it.State, "claimed_by": it.ClaimedBy, "claim_expires_at": it.ClaimExpiresAt}
}

// claimTx claims a locked item for actor: refused with ErrClaimed while someone else holds a
// live claim; the holder's own claim is renewed.
func claimTx(ctx context.Context, tx pgx.Tx, actor audit.Actor, it Item, lease time.Duration, batch *batchRef) (Item, error) {
	if !it.Open() {
		return it, fmt.Errorf("claim item %s: %w", it.ID, ErrClosed)
	}
	if it.ClaimedBy != "" && it.ClaimedBy != actor.Name {
		return it, fmt.Errorf("claim item %s (held by %s until %s): %w", it.ID, it.ClaimedBy, it.ClaimExpiresAt.UTC().Format(time.RFC3339), ErrClaimed)
	}
	before := claimView(it)
	var at, exp time.Time
	if err := tx.QueryRow(ctx, `UPDATE reconciliation_items SET claimed_by = $2, claimed_at = now(),
		claim_expires_at = now() + $3 * interval '1 millisecond' WHERE id = $1 RETURNING claimed_at, claim_expires_at`,
		it.seq, actor.Name, lease.Milliseconds()).Scan(&at, &exp); err != nil {
		return it, fmt.Errorf("claim item %s: %w", it.ID, err)
	}
	it.ClaimedBy, it.ClaimedAt, it.ClaimExpiresAt = actor.Name, &at, &exp
	after := claimView(it)
	if batch != nil {
		after["batch"] = batch.id
	}
	return it, audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: it.Tenant, Action: "reconcile.claim", Target: target(it.ID),
		Before: before, After: after})
}

// DefaultLease is how long a claim lasts when the caller gives none.
const DefaultLease = 15 * time.Minute

// Claim claims an item for actor for lease (DefaultLease when zero). A competing live claim is
// refused with ErrClaimed and never overwritten; the holder's own claim is renewed. Audited.
func (s *Store) Claim(ctx context.Context, actor audit.Actor, scope Scope, id string, lease time.Duration) (Item, error) {
	if lease <= 0 {
		lease = DefaultLease
	}
	var it Item
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := lockItem(ctx, tx, scope, id)
		if err != nil {
			return err
		}
		it, err = claimTx(ctx, tx, actor, cur, lease, nil)
		return err
	})
	return it, err
}

// Release gives up actor's claim. Audited.
func (s *Store) Release(ctx context.Context, actor audit.Actor, scope Scope, id string) (Item, error) {
	var it Item
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := lockItem(ctx, tx, scope, id)
		if err != nil {
			return err
		}
		if cur.ClaimedBy != actor.Name {
			return fmt.Errorf("release item %s: %w", id, ErrNotClaimed)
		}
		if _, err := tx.Exec(ctx, `UPDATE reconciliation_items SET claimed_by = NULL, claimed_at = NULL, claim_expires_at = NULL WHERE id = $1`, cur.seq); err != nil {
			return fmt.Errorf("release item %s: %w", id, err)
		}
		before := claimView(cur)
		cur.ClaimedBy, cur.ClaimedAt, cur.ClaimExpiresAt = "", nil, nil
		it = cur
		return audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: cur.Tenant, Action: "reconcile.release", Target: target(id),
			Before: before, After: claimView(cur)})
	})
	return it, err
}

// Bounds of what a person writes into a resolution.
const (
	MaxNote        = 4000
	MaxEvidenceURL = 1000
)

// validate checks a resolution against the allowed outcomes and reasons.
func (s *Store) validate(r Resolution) error {
	if !slices.Contains(Resolutions, r.Outcome) {
		return fmt.Errorf("%w: outcome must be applied, not_applied, compensated or duplicate", ErrInvalid)
	}
	if !slices.Contains(s.reasons, r.Reason) {
		return fmt.Errorf("%w: unknown resolution reason %q", ErrInvalid, r.Reason)
	}
	if strings.TrimSpace(r.Note) == "" {
		return fmt.Errorf("%w: a note is required", ErrInvalid)
	}
	if len(r.Note) > MaxNote || len(r.EvidenceURL) > MaxEvidenceURL {
		return fmt.Errorf("%w: a note is at most %d bytes and an evidence link at most %d", ErrInvalid, MaxNote, MaxEvidenceURL)
	}
	u, err := url.Parse(strings.TrimSpace(r.EvidenceURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: an evidence link (http or https URL) is required", ErrInvalid)
	}
	return nil
}

// resolveTx resolves a locked item claimed by actor: closes it, sets the operation's domain
// outcome, stores the resolution as a verification (source person), and writes the timeline
// entry and the audit row.
func resolveTx(ctx context.Context, tx pgx.Tx, actor audit.Actor, it Item, r Resolution, batch *batchRef) (Item, error) {
	if !it.Open() {
		return it, fmt.Errorf("resolve item %s: %w", it.ID, ErrClosed)
	}
	if it.ClaimedBy != actor.Name {
		if it.ClaimedBy != "" {
			return it, fmt.Errorf("resolve item %s (held by %s): %w", it.ID, it.ClaimedBy, ErrClaimed)
		}
		return it, fmt.Errorf("resolve item %s: %w", it.ID, ErrNotClaimed)
	}
	before := map[string]any{"state": it.State, "domain_outcome": it.DomainOutcome, "claimed_by": it.ClaimedBy}
	note, evidence := strings.TrimSpace(r.Note), strings.TrimSpace(r.EvidenceURL)
	if err := tx.QueryRow(ctx, `UPDATE reconciliation_items SET state = 'resolved', closed_at = now(), closed_by = $2,
		resolution = $3, resolution_reason = $4, note = $5, evidence_url = $6, batch_id = $7, next_verify_at = NULL,
		claimed_by = NULL, claimed_at = NULL, claim_expires_at = NULL WHERE id = $1 RETURNING closed_at`,
		it.seq, actor.Name, r.Outcome, r.Reason, note, evidence, batch.key()).Scan(&it.ClosedAt); err != nil {
		return it, fmt.Errorf("resolve item %s: %w", it.ID, err)
	}
	it.State, it.Resolution, it.ResolutionReason, it.Note, it.EvidenceURL, it.ClosedBy, it.BatchID = StateResolved, r.Outcome, r.Reason, note, evidence, actor.Name, batch.public()
	it.ClaimedBy, it.ClaimedAt, it.ClaimExpiresAt = "", nil, nil
	if err := setOutcome(ctx, tx, it.OperationID, domainOutcome(r.Outcome), "person", evidence); err != nil {
		return it, err
	}
	it.DomainOutcome = domainOutcome(r.Outcome)
	if _, err := tx.Exec(ctx, `INSERT INTO outcome_verifications (operation_id, item_id, tenant, source, trigger, answer, receipt, detail)
		VALUES ($1,$2,$3,'person','resolution',$4,$5,$6)`, it.OperationID, it.seq, it.Tenant, r.Outcome, evidence,
		truncate(actor.Name+": "+r.Reason+" — "+note, 1000)); err != nil {
		return it, fmt.Errorf("record resolution of item %s: %w", it.ID, err)
	}
	if err := personTimeline(ctx, tx, it.OperationID, actor.Name, "reconciled", fmt.Sprintf("resolved %s by %s (%s)", r.Outcome, actor.Name, r.Reason)); err != nil {
		return it, err
	}
	after := map[string]any{"state": it.State, "resolution": r.Outcome, "domain_outcome": it.DomainOutcome, "evidence": evidence}
	if batch != nil {
		after["batch"] = batch.id
	}
	return it, audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: it.Tenant, Action: "reconcile.resolve", Target: target(it.ID),
		Before: before, After: after, Reason: r.Reason + ": " + note})
}

// Resolve resolves an item the actor holds a live claim on, with an outcome, a reason, a
// required note and an evidence link. The operation's domain outcome is set (duplicate counts
// as not_applied for this operation). Audited.
func (s *Store) Resolve(ctx context.Context, actor audit.Actor, scope Scope, id string, r Resolution) (Item, error) {
	if err := s.validate(r); err != nil {
		return Item{}, err
	}
	var it Item
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := lockItem(ctx, tx, scope, id)
		if err != nil {
			return err
		}
		it, err = resolveTx(ctx, tx, actor, cur, r, nil)
		return err
	})
	return it, err
}

// setOutcome sets an operation's domain outcome from a verified source, clears its attention,
// closes its handoff (the work handed to a person is settled, so it no longer needs one) and
// stores the verified outcome with its receipt. Applied, not_applied and compensated only.
func setOutcome(ctx context.Context, q Querier, opID, outcome, source, receipt string) error {
	if _, err := q.Exec(ctx, `UPDATE operations SET domain_outcome = $2, attention = NULL, attention_reason = NULL, updated_at = now()
		WHERE id = $1`, opID, outcome); err != nil {
		return fmt.Errorf("set outcome of %s: %w", opID, err)
	}
	if _, err := q.Exec(ctx, `UPDATE handoff_items SET closed_at = now() WHERE operation_id = $1 AND closed_at IS NULL`, opID); err != nil {
		return fmt.Errorf("close handoff of %s: %w", opID, err)
	}
	if _, err := q.Exec(ctx, `INSERT INTO verified_outcomes (operation_id, outcome, source, receipt) VALUES ($1,$2,$3,$4)
		ON CONFLICT (operation_id) DO UPDATE SET outcome = excluded.outcome, source = excluded.source, receipt = excluded.receipt,
		verified_at = now()`, opID, outcome, source, truncate(receipt, 500)); err != nil {
		return fmt.Errorf("store verified outcome of %s: %w", opID, err)
	}
	return nil
}

// Timeline sources written here (the operations package's SourceVerifier and SourceOperator):
// the verifier's checks as the verifier's, a person's resolution as a person's, with the
// person's name in its own column.
const sourceVerifier = "verifier"

// timeline appends a line written by the verifier.
func timeline(ctx context.Context, q Querier, opID, source, state, msg string) error {
	if _, err := q.Exec(ctx, `INSERT INTO task_timeline (operation_id, source, state, message) VALUES ($1,$2,$3,$4)`,
		opID, source, state, truncate(msg, 500)); err != nil {
		return fmt.Errorf("timeline of %s: %w", opID, err)
	}
	return nil
}

// personTimeline appends a line for an action of the person actor.
func personTimeline(ctx context.Context, q Querier, opID, actor, state, msg string) error {
	if _, err := q.Exec(ctx, `INSERT INTO task_timeline (operation_id, source, actor, state, message) VALUES ($1,'operator',$2,$3,$4)`,
		opID, truncate(actor, 200), state, truncate(msg, 500)); err != nil {
		return fmt.Errorf("timeline of %s: %w", opID, err)
	}
	return nil
}

// Reverify puts an open item back to automatic verification now (attempts start again). Audited.
func (s *Store) Reverify(ctx context.Context, actor audit.Actor, scope Scope, id string) (Item, error) {
	var it Item
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := lockItem(ctx, tx, scope, id)
		if err != nil {
			return err
		}
		it, err = reverifyTx(ctx, tx, actor, cur, nil)
		return err
	})
	return it, err
}

func reverifyTx(ctx context.Context, tx pgx.Tx, actor audit.Actor, it Item, batch *batchRef) (Item, error) {
	if !it.Open() {
		return it, fmt.Errorf("re-verify item %s: %w", it.ID, ErrClosed)
	}
	if it.ClaimedBy != "" && it.ClaimedBy != actor.Name {
		return it, fmt.Errorf("re-verify item %s (held by %s): %w", it.ID, it.ClaimedBy, ErrClaimed)
	}
	before := map[string]any{"state": it.State, "attempts": it.Attempts}
	if _, err := tx.Exec(ctx, `UPDATE reconciliation_items SET state = 'verifying', attempts = 0, next_verify_at = now() WHERE id = $1`, it.seq); err != nil {
		return it, fmt.Errorf("re-verify item %s: %w", it.ID, err)
	}
	it.State, it.Attempts = StateVerifying, 0
	after := map[string]any{"state": it.State, "attempts": 0}
	if batch != nil {
		after["batch"] = batch.id
	}
	return it, audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: it.Tenant, Action: "reconcile.reverify", Target: target(it.ID),
		Before: before, After: after})
}

// Retry sends the operation of a closed item again, once, after a not_applied outcome. The
// call reuses the operation's idempotency key (through the Retrier, the ledger's start path),
// so the system of record applies the effect at most once. The retry is recorded and audited
// before it is sent.
func (s *Store) Retry(ctx context.Context, actor audit.Actor, scope Scope, id string) (Item, error) {
	if s.retrier == nil {
		return Item{}, fmt.Errorf("retry item %s: no retrier configured: %w", id, ErrRetryNotAllowed)
	}
	var it Item
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := lockItem(ctx, tx, scope, id)
		if err != nil {
			return err
		}
		if !cur.CanRetry() || cur.DomainOutcome != string(OutcomeNotApplied) {
			return fmt.Errorf("retry item %s (resolution %q, outcome %s): %w", id, cur.Resolution, cur.DomainOutcome, ErrRetryNotAllowed)
		}
		if err := tx.QueryRow(ctx, `UPDATE reconciliation_items SET retried_at = now(), retried_by = $2 WHERE id = $1 RETURNING retried_at`,
			cur.seq, actor.Name).Scan(&cur.RetriedAt); err != nil {
			return fmt.Errorf("retry item %s: %w", id, err)
		}
		cur.RetriedBy = actor.Name
		// The retried call is verified again once it answers.
		if _, err := tx.Exec(ctx, `DELETE FROM outcome_checks WHERE operation_id = $1`, cur.OperationID); err != nil {
			return fmt.Errorf("retry item %s: %w", id, err)
		}
		it = cur
		return audit.Record(ctx, tx, audit.Entry{Actor: actor, Tenant: cur.Tenant, Action: "reconcile.retry", Target: target(id),
			After: map[string]any{"operation": cur.OperationID, "idempotency_key": cur.IdempotencyKey}, Reason: "retry after not_applied, same idempotency key"})
	})
	if err != nil {
		return Item{}, err
	}
	if err := s.retrier.Retry(ctx, it.OperationID, actor.Name); err != nil {
		return it, fmt.Errorf("retry operation %s: %w", it.OperationID, err)
	}
	return it, nil
}
