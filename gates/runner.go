package gates

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
)

// ToolCase is a tool and its arguments for one kind of case.
type ToolCase struct {
	// Tool is the tool name.
	Tool string `json:"tool"`
	// Arguments are the call's arguments (nil = none).
	Arguments map[string]any `json:"arguments,omitempty"`
}

// Target is the server a run tests and what the policy says about it.
type Target struct {
	// Name is the server's name in the policy, or its URL for an ad-hoc run.
	Name string
	// Workflow is the workflow whose gate this is ("" for an ad-hoc run).
	Workflow string
	// URL is the Streamable HTTP endpoint.
	URL string
	// Token and SecondToken are the bearer tokens of the gate's two identities; without a
	// second one the cross-identity cases are inconclusive. Never logged or stored.
	Token, SecondToken string
	// Era forces or detects the era (default auto).
	Era mcpclient.EraChoice
	// Quick, Slow, Input and Fail are the cases' calls: one that completes at once, one that
	// works for a few seconds, one that asks for input, one that ends with a tool error. A
	// missing one makes the cases that need it inconclusive, with that reason. Quick, when
	// nil, is picked from the server's tools (a task-capable tool with its required string
	// arguments filled).
	Quick, Slow, Input, Fail *ToolCase
	// Effectful is true when the workflow's tool changes a system of record. With an
	// auto-picked tool it is true unless the tool is annotated read-only.
	Effectful bool
	// GateTarget is true when the policy marks the server as a gate target. An effectful
	// tool is never run against a server that is not one.
	GateTarget bool
	// IdempotencyArgument is the argument that carries the idempotency key ("" = none; the
	// key always travels in _meta as the operation id).
	IdempotencyArgument string
	// Verify is the workflow's outcome verifier: how many effects the system of record holds
	// for an idempotency key. Nil: the effect checks are inconclusive.
	Verify func(ctx context.Context, key string) (int, error)
	// Concurrency is the load suite's N (default 4, at most 16).
	Concurrency int
	// ManifestFingerprint and Pins are bound into the run's verdict.
	ManifestFingerprint string
	Pins                map[string]string
}

// Runner runs suites.
type Runner struct {
	// Build is Taskgate's build, bound into each run.
	Build string
	// CaseTimeout bounds one case (default 30s).
	CaseTimeout time.Duration
	// Logger receives logs; no token is logged (default: discard).
	Logger *slog.Logger
}

// session is one run's state.
type session struct {
	r      *Runner
	t      Target
	run    *Run
	proxy  *faultproxy.Proxy
	url    string
	conn   mcpclient.Conn
	info   mcpclient.ServerInfo
	inputs *inputBox
	prefix string
	seq    int
	quick  *ToolCase
	// observations shared between cases
	quickTask  string
	mu         sync.Mutex
	violations []string
	// texts are the status messages and result texts the server sent (bounded), for the
	// secret-leak check.
	texts []string
	// listed are task ids our own tasks/list showed (bounded); listCursor is the first
	// nextCursor it gave, for the cursor replay by another identity.
	listed     map[string]bool
	listCursor string
}

// remember notes a task id our own listing showed.
func (s *session) remember(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed == nil {
		s.listed = map[string]bool{}
	}
	if len(s.listed) < 2000 {
		s.listed[id] = true
	}
}

func (s *session) saw(text string) {
	if text == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.texts) < 2000 {
		s.texts = append(s.texts, text)
	}
}

type inputBox struct {
	mu sync.Mutex
	ch map[string]chan mcpclient.InputRequest
}

func (b *inputBox) wait(taskID string) chan mcpclient.InputRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = map[string]chan mcpclient.InputRequest{}
	}
	c, ok := b.ch[taskID]
	if !ok {
		c = make(chan mcpclient.InputRequest, 4)
		b.ch[taskID] = c
	}
	return c
}

func (b *inputBox) offer(r mcpclient.InputRequest) {
	c := b.wait(r.TaskID)
	select {
	case c <- r:
	default:
	}
}

// Run runs the suites (all when none is given) against the target and returns the run,
// decided. It never panics on a hostile server: what cannot be decided is inconclusive.
func (r *Runner) Run(ctx context.Context, t Target, suites []Suite) *Run {
	if r.CaseTimeout <= 0 {
		r.CaseTimeout = 30 * time.Second
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	if len(suites) == 0 {
		suites = Suites
	}
	if t.Era == "" {
		t.Era = mcpclient.EraAuto
	}
	if t.Concurrency <= 0 {
		t.Concurrency = 4
	}
	t.Concurrency = min(t.Concurrency, 16)
	run := &Run{Binding: Binding{Workflow: t.Workflow, Server: t.Name, ManifestFingerprint: t.ManifestFingerprint, Build: r.Build, Pins: t.Pins},
		Started: time.Now().UTC(), Deviations: Deviations{}}
	if run.Server == "" {
		run.Server = t.URL
	}
	defer func() {
		run.Finished = time.Now().UTC()
		run.DeviationFingerprint = run.Deviations.Fingerprint()
		run.decide()
	}()
	var b [4]byte
	_, _ = rand.Read(b[:])
	s := &session{r: r, t: t, run: run, inputs: &inputBox{}, prefix: "gate-" + hex.EncodeToString(b[:])}
	if t.URL == "" {
		run.Error = ErrNoTarget.Error()
		return run
	}
	p, err := faultproxy.New(t.URL)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	if s.url, err = p.Start(); err != nil {
		run.Error = "fault proxy: " + err.Error()
		return run
	}
	defer p.Close()
	s.proxy = p
	for _, name := range []string{DevToolErrorStatus, DevRequestedTTL, DevPollInterval, DevSessionBound, DevToolsCallCapability,
		DevCancelOnRequestEnd, DevUnknownSession, DevUpdateDropsAnswer} {
		run.Deviations.set(name, NotObserved, "", false)
	}
	dctx, cancel := context.WithTimeout(ctx, r.CaseTimeout)
	s.conn, err = s.dial(dctx, t.Token, false, nil)
	cancel()
	c := s.begin(SuiteContract, "initialize")
	if err != nil {
		run.Error = "connect: " + inert(err.Error(), maxNote)
		s.end(c, Fail, "the server could not be reached or did not complete the handshake: "+inert(err.Error(), maxNote))
		return run
	}
	defer s.conn.Close()
	s.info = s.conn.Info()
	run.Era, run.ServerName, run.ServerVersion = string(s.info.Era), inert(s.info.Name, 120), inert(s.info.Version, 60)
	if run.ManifestFingerprint == "" {
		// The manifest as this session saw it, so the verdict binds to what was tested.
		if m, err := manifests.FromInfo(run.Server, s.info, s.conn.Tools(), time.Now()); err == nil {
			run.ManifestFingerprint, _ = m.Fingerprint()
		}
	}
	c.note("era %s, protocol %s, server %s %s", s.info.Era, inert(s.info.ProtocolVersion, 40), run.ServerName, run.ServerVersion)
	s.end(c, Pass, "handshake completed ("+string(s.info.Era)+")")
	s.quick = s.pickQuick()
	for _, suite := range suites {
		if ctx.Err() != nil {
			break
		}
		switch suite {
		case SuiteContract:
			s.contract(ctx)
		case SuiteFault:
			s.fault(ctx)
		case SuiteSecurity:
			s.security(ctx)
		case SuiteLoad:
			s.load(ctx)
		case SuiteRecovery:
			s.recovery(ctx)
		case SuiteCancellation:
			s.cancellation(ctx)
		case SuiteCompatibility:
			s.compatibility(ctx)
		}
	}
	if slices.Contains(suites, SuiteSecurity) {
		s.secrets() // after every suite, over everything the server sent
	}
	return run
}

func (s *session) dial(ctx context.Context, token string, keep bool, resume *mcpclient.Resume) (mcpclient.Conn, error) {
	return mcpclient.Dial(ctx, mcpclient.Options{URL: s.url, Token: token, Era: s.t.Era, OnInput: s.inputs.offer,
		KeepSessionOnClose: keep, Resume: resume, Logger: s.r.Logger, ClientName: "taskgate-gates"})
}

// caseRec is a case being run.
type caseRec struct {
	c    Case
	mark int
	t0   time.Time
}

func (c *caseRec) note(format string, args ...any) {
	if len(c.c.Evidence.Notes) < 40 {
		c.c.Evidence.Notes = append(c.c.Evidence.Notes, inert(fmt.Sprintf(format, args...), maxNote))
	}
}

func (c *caseRec) time(name string, d time.Duration) {
	if c.c.Evidence.Timings == nil {
		c.c.Evidence.Timings = map[string]int64{}
	}
	c.c.Evidence.Timings[name] = d.Milliseconds()
}

func (s *session) begin(suite Suite, name string) *caseRec {
	mark := 0
	if s.proxy != nil {
		mark = len(s.proxy.Messages())
	}
	now := time.Now()
	return &caseRec{c: Case{Suite: suite, Name: name, Started: now.UTC()}, mark: mark, t0: now}
}

// maxCaseMessages bounds the messages kept per case (the last ones).
const maxCaseMessages = 80

func (s *session) end(c *caseRec, v Verdict, reason string) {
	c.c.Verdict, c.c.Reason, c.c.Duration = v, inert(reason, maxNote), time.Since(c.t0)
	if s.proxy != nil {
		msgs := s.proxy.Messages()
		if c.mark < len(msgs) {
			msgs = msgs[c.mark:]
			if len(msgs) > maxCaseMessages {
				msgs = msgs[len(msgs)-maxCaseMessages:]
			}
			c.c.Evidence.Messages = msgs
		}
	}
	s.run.Cases = append(s.run.Cases, c.c)
}

// calls counts the tools/call requests the product sent since the case began.
func (s *session) calls(c *caseRec) int {
	n := 0
	for _, m := range s.proxy.Messages()[c.mark:] {
		if m.Dir == "request" && m.Method == "tools/call" {
			n++
		}
	}
	return n
}

func (s *session) key() string {
	s.seq++
	return fmt.Sprintf("%s-%d", s.prefix, s.seq)
}

func (s *session) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, s.r.CaseTimeout)
}

// allowed returns "" when tc may run, or the reason it may not.
func (s *session) allowed(tc *ToolCase, what string) string {
	if tc == nil {
		return "no " + what + " call is configured in the gate target"
	}
	if s.t.Effectful && !s.t.GateTarget {
		return "the tool is effectful and the server is not marked as a gate target: it is not run"
	}
	return ""
}

// pickQuick returns the configured quick case or a task-capable tool of the server.
func (s *session) pickQuick() *ToolCase {
	if s.t.Quick != nil {
		return s.t.Quick
	}
	for _, pref := range []mcpclient.TaskSupport{mcpclient.TaskOptional, mcpclient.TaskServerDecides, mcpclient.TaskRequired} {
		for _, tl := range s.conn.Tools() {
			if tl.TaskSupport != pref {
				continue
			}
			if tl.ReadOnlyHint == nil || !*tl.ReadOnlyHint {
				s.t.Effectful = true
			}
			return &ToolCase{Tool: tl.Name, Arguments: fillRequired(tl.InputSchema)}
		}
	}
	return nil
}

// fillRequired gives each required property of a schema a plain value of its type.
func fillRequired(schema json.RawMessage) map[string]any {
	var sc struct {
		Required   []string `json:"required"`
		Properties map[string]struct {
			Type string `json:"type"`
			Enum []any  `json:"enum"`
		} `json:"properties"`
	}
	out := map[string]any{}
	if json.Unmarshal(schema, &sc) != nil {
		return out
	}
	for _, name := range sc.Required {
		p := sc.Properties[name]
		switch {
		case len(p.Enum) > 0:
			out[name] = p.Enum[0]
		case p.Type == "integer" || p.Type == "number":
			out[name] = 1
		case p.Type == "boolean":
			out[name] = true
		default:
			out[name] = "gate"
		}
	}
	return out
}

func (s *session) args(tc *ToolCase, key string) map[string]any {
	out := map[string]any{}
	for k, v := range tc.Arguments {
		out[k] = v
	}
	if s.t.IdempotencyArgument != "" {
		out[s.t.IdempotencyArgument] = key
	}
	return out
}

func (s *session) create(ctx context.Context, conn mcpclient.Conn, tc *ToolCase, key string, ttl time.Duration) (mcpclient.Task, error) {
	return conn.CreateTask(ctx, tc.Tool, s.args(tc, key), mcpclient.TaskOptions{CallOptions: mcpclient.CallOptions{OperationID: key}, TTL: ttl})
}

// followed is what following a task to its end saw.
type followed struct {
	last       mcpclient.Snapshot
	statuses   []mcpclient.Status
	violations []string
	errs       int
	polls      int
}

// follow polls a task until it is terminal (or stop says so), tolerating up to 10 transport
// failures.
func (s *session) follow(ctx context.Context, conn mcpclient.Conn, id string, stop func(mcpclient.Snapshot) bool) (followed, error) {
	var f followed
	for {
		snap, err := conn.GetTask(ctx, id)
		f.polls++
		if err != nil {
			if errors.Is(err, mcpclient.ErrUnknownTask) || errors.Is(err, mcpclient.ErrUnauthorized) || ctx.Err() != nil || f.errs >= 10 {
				return f, err
			}
			f.errs++
		} else {
			f.last = snap
			s.saw(snap.Task.StatusMessage)
			if n := len(f.statuses); n == 0 || f.statuses[n-1] != snap.Task.Status {
				f.statuses = append(f.statuses, snap.Task.Status)
			}
			if snap.Violation != nil {
				f.violations = append(f.violations, fmt.Sprintf("%s → %s", snap.Violation.From, snap.Violation.To))
				s.addViolation(snap.Violation)
			}
			if snap.Task.Status.Terminal() || (stop != nil && stop(snap)) {
				return f, nil
			}
		}
		d := 50 * time.Millisecond
		if err == nil && f.last.Task.PollInterval > 0 {
			d = min(max(f.last.Task.PollInterval, 20*time.Millisecond), 500*time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return f, ctx.Err()
		case <-time.After(d):
		}
	}
}

func (s *session) addViolation(v *mcpclient.TransitionError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violations = append(s.violations, fmt.Sprintf("task %s: %s → %s", inert(v.TaskID, 80), v.From, inert(string(v.To), 40)))
}

// outcome returns the task's outcome: inlined in the extension's terminal snapshot, fetched
// with tasks/result in 2025-11-25 (retried once after a transport failure).
func (s *session) outcome(ctx context.Context, conn mcpclient.Conn, f followed) (mcpclient.Outcome, error) {
	if f.last.Outcome != nil {
		s.sawOutcome(*f.last.Outcome)
		return *f.last.Outcome, nil
	}
	out, err := conn.AwaitOutcome(ctx, f.last.Task.ID)
	if err != nil && ctx.Err() == nil && !errors.Is(err, mcpclient.ErrUnknownTask) {
		out, err = conn.AwaitOutcome(ctx, f.last.Task.ID)
	}
	if err == nil {
		s.sawOutcome(out)
	}
	return out, err
}

func (s *session) sawOutcome(o mcpclient.Outcome) {
	if o.Result != nil {
		for _, t := range o.Result.Texts() {
			s.saw(t)
		}
	}
	if o.Error != nil {
		s.saw(o.Error.Message)
	}
}

func statusList(st []mcpclient.Status) string {
	parts := make([]string, len(st))
	for i, x := range st {
		parts[i] = string(x)
	}
	return strings.Join(parts, " → ")
}

// legacy reports whether the server speaks 2025-11-25.
func (s *session) legacy() bool { return s.info.Era == mcpclient.EraLegacy }

// tasksOffered reports whether task-augmented tools/call is offered at all.
func (s *session) tasksOffered() bool {
	c := s.info.Capabilities
	if s.legacy() {
		return c.Tasks && c.TasksToolsCall
	}
	return c.Extension
}

// rawPost sends one JSON-RPC request straight to the server (not through the client), for
// the cases that need a header the client never sends.
func (s *session) rawPost(ctx context.Context, headers map[string]string, body string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader([]byte(body)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if s.t.Token != "" {
		req.Header.Set("Authorization", "Bearer "+s.t.Token)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
