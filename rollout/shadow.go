package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/internal/safetext"
	"github.com/taskgate/taskgate/mcpclient"
)

// ConnSource opens (or reuses) a connection to a configured server (*operations.Servers).
type ConnSource interface {
	Conn(ctx context.Context, server string) (mcpclient.Conn, error)
}

// MetaShadowOf names, in a shadow Task's _meta, the operation whose call it repeats.
const MetaShadowOf = "io.taskgate/shadow-of"

// Comparison kinds.
const (
	// ComparisonRun: a read-only workflow's call also ran as a Task and both results and
	// states were compared.
	ComparisonRun = "run"
	// ComparisonProjection: the Task route's projected decision was compared with what the
	// incumbent did; nothing ran twice.
	ComparisonProjection = "projection"
)

// Comparison is one shadow comparison of an operation the incumbent route executed.
type Comparison struct {
	OperationID string `json:"operationId"`
	Workflow    string `json:"workflow"`
	Kind        string `json:"kind"`
	// State is running (the shadow Task is being followed), compared or failed (the shadow
	// could not be run; Error says why).
	State string `json:"state"`
	// Incumbent* is what the incumbent route observed: its route, the task state its answer
	// projects to (completed, failed), whether the tool reported an error and the result hash.
	IncumbentRoute      string `json:"incumbentRoute"`
	IncumbentState      string `json:"incumbentState"`
	IncumbentToolError  bool   `json:"incumbentToolError"`
	IncumbentResultHash string `json:"incumbentResultSha256,omitempty"` // of the result text (ResultHash)
	// Shadow* is the Task route: the route and reason it decides now; for a run, the task it
	// created, its terminal state, tool error and result hash.
	ShadowRoute      string `json:"shadowRoute"`
	ShadowReason     string `json:"shadowReason"`
	ShadowTaskID     string `json:"shadowTaskId,omitempty"`
	ShadowState      string `json:"shadowState,omitempty"`
	ShadowToolError  bool   `json:"shadowToolError"`
	ShadowResultHash string `json:"shadowResultSha256,omitempty"`
	// Divergences lists each difference, in words (empty: the two agree).
	Divergences []string   `json:"divergences"`
	Error       string     `json:"error,omitempty"`
	StartedAt   time.Time  `json:"startedAt"`
	ComparedAt  *time.Time `json:"comparedAt,omitempty"`
}

// ShadowConfig configures a Shadower.
type ShadowConfig struct {
	Policy *config.Config
	Pool   *pgxpool.Pool
	// Router decides the Task route's projected decision (required).
	Router *Router
	// Conns opens connections for read-only shadow runs (required).
	Conns ConnSource
	// Replica names this replica on the comparisons it claims.
	Replica string
	// Batch is how many operations a pass compares (default 20).
	Batch int
	// Timeout bounds one shadow Task from creation to its result (default: the workflow's
	// max TTL, at most 2 minutes).
	Timeout time.Duration
	Logger  *slog.Logger
}

// Shadower compares, in the shadow stage, what the incumbent route did with the Task route.
// A read_only workflow's call runs again as a Task (once per operation, whichever replica
// claims it) and the two results and states are compared; a reversible or effectful workflow
// never runs twice: its comparison is of the Task route's projected decision only.
type Shadower struct{ cfg ShadowConfig }

// NewShadower validates cfg and returns a Shadower.
func NewShadower(cfg ShadowConfig) (*Shadower, error) {
	if cfg.Policy == nil || cfg.Pool == nil || cfg.Router == nil || cfg.Conns == nil {
		return nil, errors.New("rollout: ShadowConfig needs Policy, Pool, Router and Conns")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Shadower{cfg: cfg}, nil
}

type shadowCandidate struct {
	id, tenant, route string
	args              []byte
	envState          *string
	envToolError      *bool
	envPreview        *string
	jobStatus         *string
}

// RunOnce compares the operations the incumbent finished in the shadow stage that have no
// comparison yet, up to Batch per workflow, and returns how many it compared.
func (s *Shadower) RunOnce(ctx context.Context) (int, error) {
	n := 0
	for i := range s.cfg.Policy.Workflows {
		w := &s.cfg.Policy.Workflows[i]
		st, err := s.cfg.Router.cfg.Stages.Get(ctx, w.Name)
		if err != nil {
			return n, err
		}
		if st.Stage != StageShadow {
			continue
		}
		cands, err := s.candidates(ctx, w)
		if err != nil {
			return n, err
		}
		for _, c := range cands {
			ok, err := s.compare(ctx, w, c)
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
		}
	}
	return n, nil
}

// Run calls RunOnce every period until ctx ends; errors go to the logger.
func (s *Shadower) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.ErrorContext(ctx, "shadow comparison pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// candidates are the workflow's shadow-stage operations without a comparison: for a read-only
// workflow once the incumbent finished (its answer is compared), for the others at once (only
// the decision is compared).
func (s *Shadower) candidates(ctx context.Context, w *config.Workflow) ([]shadowCandidate, error) {
	rows, err := s.cfg.Pool.Query(ctx, `
		SELECT o.id::text, o.tenant, o.route, o.arguments, e.status, e.tool_error, e.preview, j.status
		FROM operations o
		LEFT JOIN task_envelopes e ON e.operation_id = o.id
		LEFT JOIN job_runs j ON j.operation_id = o.id
		WHERE o.workflow = $1 AND o.reason_code = $2 AND o.route IN ('sync', 'job_api')
		    AND (e.operation_id IS NOT NULL OR j.status IN ('succeeded', 'failed') OR $4)
		    AND NOT EXISTS (SELECT 1 FROM rollout_shadow_comparisons c WHERE c.operation_id = o.id)
		ORDER BY o.created_at LIMIT $3`, w.Name, string(ReasonShadow), s.cfg.Batch, w.Effect != config.EffectReadOnly)
	if err != nil {
		return nil, fmt.Errorf("shadow candidates of %s: %w", w.Name, err)
	}
	defer rows.Close()
	var out []shadowCandidate
	for rows.Next() {
		var c shadowCandidate
		if err := rows.Scan(&c.id, &c.tenant, &c.route, &c.args, &c.envState, &c.envToolError, &c.envPreview, &c.jobStatus); err != nil {
			return nil, fmt.Errorf("shadow candidates of %s: %w", w.Name, err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// incumbent fills the incumbent's side: the task state its answer projects to.
func (c shadowCandidate) incumbent(cmp *Comparison) {
	cmp.IncumbentRoute = c.route
	switch {
	case c.envState != nil:
		cmp.IncumbentState = *c.envState
		cmp.IncumbentToolError = c.envToolError != nil && *c.envToolError
		if c.envPreview != nil {
			cmp.IncumbentResultHash = textHash(*c.envPreview)
		}
	case c.jobStatus != nil && *c.jobStatus == "succeeded":
		cmp.IncumbentState = string(mcpclient.StatusCompleted)
	case c.jobStatus != nil && *c.jobStatus == "failed":
		cmp.IncumbentState = string(mcpclient.StatusFailed)
	case c.jobStatus != nil:
		cmp.IncumbentState = "job " + *c.jobStatus
	}
	// A tool error is "failed" in the 2025-11-25 projection whatever the route said.
	if cmp.IncumbentToolError {
		cmp.IncumbentState = string(mcpclient.StatusFailed)
	}
}

// compare claims the operation and compares it; false when another replica claimed it first.
func (s *Shadower) compare(ctx context.Context, w *config.Workflow, c shadowCandidate) (bool, error) {
	cmp := Comparison{OperationID: c.id, Workflow: w.Name, Kind: ComparisonProjection}
	c.incumbent(&cmp)
	r, err := s.cfg.Router.Route(ctx, w.Name, c.tenant)
	if err != nil {
		return false, err
	}
	projected := r.Decision
	if r.Shadow != nil {
		projected = *r.Shadow
	}
	cmp.ShadowRoute, cmp.ShadowReason = string(projected.Route), string(projected.Reason)
	run := w.Effect == config.EffectReadOnly && r.Decision.Shadow.CompareAsTask && projected.Route == RouteTask
	if run {
		cmp.Kind = ComparisonRun
	}
	tag, err := s.cfg.Pool.Exec(ctx, `INSERT INTO rollout_shadow_comparisons (operation_id, workflow, kind, replica, incumbent_route,
		    incumbent_state, incumbent_tool_error, incumbent_result_sha256, shadow_route, shadow_reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (operation_id) DO NOTHING`,
		c.id, w.Name, cmp.Kind, s.cfg.Replica, cmp.IncumbentRoute, cmp.IncumbentState, cmp.IncumbentToolError, cmp.IncumbentResultHash,
		cmp.ShadowRoute, cmp.ShadowReason)
	if err != nil {
		return false, fmt.Errorf("claim shadow comparison of %s: %w", c.id, err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	if run {
		s.runAsTask(ctx, w, c, &cmp)
	}
	if cmp.Error == "" {
		cmp.Divergences = Diverge(cmp)
	}
	state := "compared"
	if cmp.Error != "" {
		state = "failed"
	}
	d, _ := json.Marshal(cmp.Divergences)
	if d == nil || string(d) == "null" {
		d = []byte("[]")
	}
	_, err = s.cfg.Pool.Exec(ctx, `UPDATE rollout_shadow_comparisons SET state = $2, shadow_task_id = $3, shadow_state = $4,
		    shadow_tool_error = $5, shadow_result_sha256 = $6, divergences = $7, error = $8, compared_at = now()
		WHERE operation_id = $1`, c.id, state, cmp.ShadowTaskID, cmp.ShadowState, cmp.ShadowToolError, cmp.ShadowResultHash, d, cmp.Error)
	if err != nil {
		return false, fmt.Errorf("record shadow comparison of %s: %w", c.id, err)
	}
	return true, nil
}

// runAsTask runs the read-only call again as a Task and records its terminal state and
// result hash on cmp. It never retries: a creation whose answer was lost is recorded as such.
func (s *Shadower) runAsTask(ctx context.Context, w *config.Workflow, c shadowCandidate, cmp *Comparison) {
	timeout := s.cfg.Timeout
	if timeout <= 0 {
		timeout = min(w.MaxTTL.Duration, 2*time.Minute)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := s.cfg.Conns.Conn(ctx, w.Server)
	if err != nil {
		cmp.Error = "no connection to " + w.Server + ": " + bounded(err)
		return
	}
	args := map[string]any{}
	_ = json.Unmarshal(c.args, &args)
	if w.IdempotencyArgument != "" {
		args[w.IdempotencyArgument] = c.id
	}
	task, err := conn.CreateTask(ctx, w.Tool, args, mcpclient.TaskOptions{
		CallOptions: mcpclient.CallOptions{Meta: map[string]any{MetaShadowOf: c.id}}, TTL: w.MaxTTL.Duration})
	var noTask *mcpclient.NoTaskError
	switch {
	case errors.As(err, &noTask):
		out := mcpclient.Outcome{Status: mcpclient.StatusCompleted, Result: noTask.Result, ToolError: noTask.Result != nil && noTask.Result.IsError}
		cmp.ShadowState, cmp.ShadowToolError, cmp.ShadowResultHash = projectState(out), out.ToolError, ResultHash(out)
		return
	case errors.Is(err, mcpclient.ErrCreateUnacknowledged):
		cmp.ShadowState = "create_unacknowledged"
		return
	case err != nil:
		cmp.Error = "the shadow Task was not created: " + bounded(err)
		return
	}
	cmp.ShadowTaskID = task.ID
	out, err := conn.AwaitOutcome(ctx, task.ID)
	if err != nil {
		cmp.ShadowState = string(task.Status)
		cmp.Error = "the shadow Task did not finish: " + bounded(err)
		return
	}
	cmp.ShadowState, cmp.ShadowToolError, cmp.ShadowResultHash = projectState(out), out.ToolError, ResultHash(out)
}

// projectState is the 2025-11-25 task state an outcome shows: a tool error is failed.
func projectState(out mcpclient.Outcome) string {
	if out.ToolError && out.Status == mcpclient.StatusCompleted {
		return string(mcpclient.StatusFailed)
	}
	return string(out.Status)
}

// ResultHash is the SHA-256 of an outcome's result text (or JSON-RPC error message) as the
// operation ledger previews it (cleaned, control and format characters dropped, cut to 512
// bytes), so a Task's answer and a synchronous one compare equal when the server said the
// same, whatever the framing around it.
func ResultHash(out mcpclient.Outcome) string {
	var text string
	switch {
	case out.Result != nil:
		text = strings.Join(out.Result.Texts(), "\n")
	case out.Error != nil:
		text = out.Error.Message
	}
	t, _ := safetext.Clean(text)
	return textHash(previewText(t))
}

// previewText is the ledger's preview rule: valid UTF-8, no control characters but newline
// and tab, no format characters or line and paragraph separators, at most 512 bytes.
func previewText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	return safetext.Cut(s, 512)
}

func textHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Diverge lists how the shadow side departs from the incumbent's. A projection diverges when
// the Task route would not take the Task route for the operation; a run when the states, the
// tool errors or the results differ.
func Diverge(c Comparison) []string {
	out := []string{}
	if c.ShadowRoute != string(RouteTask) {
		out = append(out, fmt.Sprintf("the Task route would go %s (%s), not as a Task", c.ShadowRoute, c.ShadowReason))
	}
	if c.Kind != ComparisonRun {
		return out
	}
	if c.ShadowState != c.IncumbentState {
		out = append(out, fmt.Sprintf("task state: shadow %s, incumbent %s", orNone(c.ShadowState), orNone(c.IncumbentState)))
	}
	if c.ShadowToolError != c.IncumbentToolError {
		out = append(out, fmt.Sprintf("tool error: shadow %s, incumbent %s", yesNo(c.ShadowToolError), yesNo(c.IncumbentToolError)))
	}
	if c.ShadowResultHash != "" && c.IncumbentResultHash != "" && c.ShadowResultHash != c.IncumbentResultHash {
		out = append(out, fmt.Sprintf("result: shadow sha256 %s, incumbent %s", shortFP(c.ShadowResultHash), shortFP(c.IncumbentResultHash)))
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// Comparisons lists the workflow's latest shadow comparisons, newest first.
func (c *Controller) Comparisons(ctx context.Context, workflow string, limit int) ([]Comparison, error) {
	rows, err := c.cfg.Pool.Query(ctx, `SELECT operation_id::text, workflow, kind, state, incumbent_route, incumbent_state, incumbent_tool_error,
		    incumbent_result_sha256, shadow_route, shadow_reason, shadow_task_id, shadow_state, shadow_tool_error, shadow_result_sha256,
		    divergences, error, started_at, compared_at
		FROM rollout_shadow_comparisons WHERE workflow = $1 ORDER BY started_at DESC, operation_id LIMIT $2`, workflow, limit)
	if err != nil {
		return nil, fmt.Errorf("shadow comparisons of %s: %w", workflow, err)
	}
	defer rows.Close()
	out := []Comparison{}
	for rows.Next() {
		var m Comparison
		var div []byte
		if err := rows.Scan(&m.OperationID, &m.Workflow, &m.Kind, &m.State, &m.IncumbentRoute, &m.IncumbentState, &m.IncumbentToolError,
			&m.IncumbentResultHash, &m.ShadowRoute, &m.ShadowReason, &m.ShadowTaskID, &m.ShadowState, &m.ShadowToolError, &m.ShadowResultHash,
			&div, &m.Error, &m.StartedAt, &m.ComparedAt); err != nil {
			return nil, fmt.Errorf("shadow comparisons of %s: %w", workflow, err)
		}
		if err := json.Unmarshal(div, &m.Divergences); err != nil {
			return nil, fmt.Errorf("shadow comparisons of %s: %w", workflow, err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// bounded is an error's text fit to store and show: cleaned and cut.
func bounded(err error) string {
	t, _ := safetext.Clean(err.Error())
	return safetext.Cut(t, 300)
}
