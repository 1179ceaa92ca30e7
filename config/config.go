// Package config loads and validates Taskgate's policy file: the MCP servers it talks to, the
// workflows it routes and the people who own them.
//
// The file is YAML and reviewed like code. Validation errors name the field and the line.
// Secrets (server tokens, verifier credentials) are never written in the file: a secret is a
// reference to an environment variable or a file, resolved when it is used.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is a validated policy file.
type Config struct {
	// Servers are the MCP servers workflows run on.
	Servers []Server `yaml:"servers"`
	// Owners are the teams that own workflows.
	Owners []Owner `yaml:"owners"`
	// Workflows are the business operations Taskgate routes.
	Workflows []Workflow `yaml:"workflows"`
	// Tenants lists the tenants known to the console (for scoping accounts and the demo).
	Tenants []string `yaml:"tenants"`
	// ResolutionReasons extends the reasons support staff may give when resolving a
	// reconciliation item.
	ResolutionReasons []string `yaml:"resolution_reasons"`
	// KillSwitch holds the rules for the kill switches.
	KillSwitch KillSwitch `yaml:"kill_switch"`

	// SHA256 is the hash of the file's bytes, recorded with decisions.
	SHA256 string `yaml:"-"`
	// Source is the path the file was read from ("embedded" for the built-in default).
	Source string `yaml:"-"`
}

// KillSwitch holds the policy's rules for kill switches.
type KillSwitch struct {
	// ReleaseFourEyes makes a release only a request until a second person approves it.
	ReleaseFourEyes bool `yaml:"release_four_eyes"`
}

// Server is one MCP server.
type Server struct {
	// Name identifies the server in workflows and pages.
	Name string `yaml:"name"`
	// URL is the Streamable HTTP endpoint, "stdio:COMMAND ARGS…" for a local process, or
	// "builtin:demo" for the reference receiver the console runs in-process.
	URL string `yaml:"url"`
	// Token is the bearer token sent to the server.
	Token *Secret `yaml:"token"`
	// Era forces the Tasks wire shape: auto (default), legacy (2025-11-25) or extension (2026-07-28).
	Era string `yaml:"era"`
	// ProbeEvery is how often the capability manifest is probed again (default 5m).
	ProbeEvery Duration `yaml:"probe_every"`
	// GateTarget marks the server as one gates may run effectful tools against (a staging
	// server). Gates never run an effectful tool against a server without it.
	GateTarget bool `yaml:"gate_target"`
}

// Owner is a team that owns workflows.
type Owner struct {
	Name    string `yaml:"name"`
	Contact string `yaml:"contact"`
}

// Effect classes.
const (
	EffectReadOnly   = "read_only"
	EffectReversible = "reversible"
	EffectEffectful  = "effectful"
)

// Task use policies.
const (
	TaskRequired  = "required"
	TaskPreferred = "preferred"
	TaskNever     = "never"
)

// Fallback kinds.
const (
	FallbackSync    = "sync"
	FallbackJobAPI  = "job_api"
	FallbackHandoff = "handoff"
	FallbackReject  = "reject"
)

// Workflow is the policy for one kind of business operation.
type Workflow struct {
	Name string `yaml:"name"`
	// Description says what the operation does, for people.
	Description string `yaml:"description"`
	// Server and Tool name the MCP tool that performs it.
	Server string `yaml:"server"`
	Tool   string `yaml:"tool"`
	// Effect is read_only, reversible or effectful.
	Effect string `yaml:"effect"`
	// TaskUse is required, preferred or never.
	TaskUse string `yaml:"task_use"`
	// Fallback is the route taken when a Task cannot or may not be used.
	Fallback Fallback `yaml:"fallback"`
	// MaxTTL caps the task lifetime Taskgate asks for and watches (default 1h).
	MaxTTL Duration `yaml:"max_ttl"`
	// InputWait is how long a question the server asks stays open for a person's answer
	// (default: until the task's deadline, which also bounds it).
	InputWait Duration `yaml:"input_wait"`
	// Concurrency caps non-terminal tasks of this workflow (0 = no cap).
	Concurrency int `yaml:"concurrency"`
	// Backpressure is what happens at the cap: "fallback" or "429" (default 429).
	Backpressure string `yaml:"backpressure"`
	// StatusRetention is how long task envelopes and timelines are kept (default 30 days).
	StatusRetention Duration `yaml:"status_retention"`
	// Owners name entries of the owners list.
	Owners []string `yaml:"owners"`
	// Verifier confirms the domain outcome with the system of record.
	Verifier Verifier `yaml:"verifier"`
	// Budgets bound each kind of call.
	Budgets Budgets `yaml:"budgets"`
	// IdempotencyArgument names the tool argument that carries the operation id, if any.
	IdempotencyArgument string `yaml:"idempotency_argument"`
	// KeepResult allows storing the full result (capped); otherwise only the envelope is kept.
	KeepResult bool `yaml:"keep_result"`
	// RetryAfter is the Retry-After sent with a 429 at the concurrency cap (default 30s).
	RetryAfter Duration `yaml:"retry_after"`
	// Stage is the rollout stage the workflow starts in before an operator changes it:
	// off (default), shadow, canary or full.
	Stage string `yaml:"stage"`
	// CanaryPercent is the share of tenants (0-100) on the Task route in the canary stage.
	CanaryPercent int `yaml:"canary_percent"`
	// Gate is the workflow's gate target: the server the gate suites test and their calls.
	// Nil: the cases that need a target are inconclusive.
	Gate *Gate `yaml:"gate"`
	// Rollout is the workflow's rollout plan (nil: the defaults of Plan).
	Rollout *RolloutPlan `yaml:"rollout"`
}

// Gate names the server a workflow's gate suites run against and the calls they make.
type Gate struct {
	// Server is the server to test (normally a staging server marked gate_target).
	Server string `yaml:"server"`
	// Token and SecondToken are the two identities' credentials (the second for the
	// cross-identity cases); nil = the server's token, and no second identity.
	Token       *Secret `yaml:"token"`
	SecondToken *Secret `yaml:"second_token"`
	// Quick, Slow, Input and Fail are the calls of the cases: one that completes at once, one
	// that works a few seconds, one that asks for input, one that ends with a tool error.
	Quick *GateCall `yaml:"quick"`
	Slow  *GateCall `yaml:"slow"`
	Input *GateCall `yaml:"input"`
	Fail  *GateCall `yaml:"fail"`
}

// GateCall is one gate case's tool call.
type GateCall struct {
	Tool      string         `yaml:"tool"`
	Arguments map[string]any `yaml:"arguments"`
}

// Rollout stages.
const (
	StageOff    = "off"
	StageShadow = "shadow"
	StageCanary = "canary"
	StageFull   = "full"
)

// Fallback is a workflow's non-Task route.
type Fallback struct {
	// Kind is sync, job_api, handoff or reject.
	Kind string `yaml:"kind"`
	// MaxDuration bounds a sync call (required for sync).
	MaxDuration Duration `yaml:"max_duration"`
	// JobAPI is the incumbent job API's base URL (required for job_api).
	JobAPI string `yaml:"job_api"`
	// Credential authenticates to the job API.
	Credential *Secret `yaml:"credential"`
}

// Verifier is how a workflow's domain outcome is confirmed.
type Verifier struct {
	// Kind is http (system-of-record lookup by idempotency key), job_api, or none (manual only).
	Kind string `yaml:"kind"`
	// BaseURL is queried as GET {base}/{key} for kind http.
	BaseURL string `yaml:"base_url"`
	// Credential authenticates to the system of record.
	Credential *Secret `yaml:"credential"`
	// Manual asks a person to confirm each success with a reconciliation item when kind is
	// none; without it such work ends unverified (listed, not an item).
	Manual bool `yaml:"manual"`
}

// Budget bounds one kind of call.
type Budget struct {
	Timeout Duration `yaml:"timeout"`
	Retries int      `yaml:"retries"`
}

// Budgets are the separate budgets per kind of call. Create never retries: an originating call
// is never repeated.
type Budgets struct {
	Create    Budget `yaml:"create"`
	Status    Budget `yaml:"status"`
	Result    Budget `yaml:"result"`
	Reconcile Budget `yaml:"reconcile"`
}

// Secret references a secret by environment variable or file; it never holds the value.
type Secret struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`
}

// Resolve reads the secret's value. The value must never be logged.
func (s *Secret) Resolve(getenv func(string) string) (string, error) {
	if s == nil {
		return "", nil
	}
	if s.Env != "" {
		v := getenv(s.Env)
		if v == "" {
			return "", fmt.Errorf("secret: environment variable %s is not set", s.Env)
		}
		return v, nil
	}
	b, err := os.ReadFile(s.File)
	if err != nil {
		return "", fmt.Errorf("secret: read %s: %w", s.File, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// String never shows the value.
func (s *Secret) String() string {
	if s == nil {
		return "none"
	}
	if s.Env != "" {
		return "env:" + s.Env
	}
	return "file:" + s.File
}

// Duration is a time.Duration written as "90s", "5m", "720h".
type Duration struct{ time.Duration }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration such as 30s or 5m", n.Line)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: want a duration such as 30s or 5m, got %q", n.Line, n.Value)
	}
	if v < 0 {
		return fmt.Errorf("line %d: duration %q is negative", n.Line, n.Value)
	}
	d.Duration = v
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML refuses an inline secret.
func (s *Secret) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		return fmt.Errorf("line %d: secrets are never written inline: use {env: NAME} or {file: PATH}", n.Line)
	}
	type plain Secret
	if err := n.Decode((*plain)(s)); err != nil {
		return err
	}
	if (s.Env == "") == (s.File == "") {
		return fmt.Errorf("line %d: a secret names exactly one of env or file", n.Line)
	}
	return nil
}

// Error is a validation error with the field path and the line it was found on.
type Error struct {
	Field string
	Line  int
	Msg   string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Errors is every validation error in a file.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return "invalid policy file:\n  " + strings.Join(parts, "\n  ")
}

// MaxFileSize bounds the policy file.
const MaxFileSize = 1 << 20

// Load reads and validates the policy file at path.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path) //nolint:gosec // the policy file the operator names
	if err != nil {
		return nil, fmt.Errorf("read policy file: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Source = path
	return c, nil
}

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// Parse decodes and validates a policy file.
func Parse(b []byte) (*Config, error) {
	if len(b) > MaxFileSize {
		return nil, fmt.Errorf("policy file is %d bytes, over the %d limit", len(b), MaxFileSize)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("policy file is empty")
		}
		return nil, fmt.Errorf("policy file is not valid YAML: %w", err)
	}
	var c Config
	dec = yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	sum := sha256.Sum256(b)
	c.SHA256 = hex.EncodeToString(sum[:])
	c.Source = "inline"
	v := validator{root: &root}
	c.applyDefaults()
	c.validate(&v)
	if len(v.errs) > 0 {
		return nil, v.errs
	}
	return &c, nil
}

func (c *Config) applyDefaults() {
	for i := range c.Servers {
		s := &c.Servers[i]
		if s.Era == "" {
			s.Era = "auto"
		}
		if s.ProbeEvery.Duration == 0 {
			s.ProbeEvery.Duration = 5 * time.Minute
		}
	}
	for i := range c.Workflows {
		w := &c.Workflows[i]
		if w.MaxTTL.Duration == 0 {
			w.MaxTTL.Duration = time.Hour
		}
		if w.StatusRetention.Duration == 0 {
			w.StatusRetention.Duration = 30 * 24 * time.Hour
		}
		if w.Backpressure == "" {
			w.Backpressure = "429"
		}
		if w.Verifier.Kind == "" {
			w.Verifier.Kind = "none"
		}
		if w.RetryAfter.Duration == 0 {
			w.RetryAfter.Duration = 30 * time.Second
		}
		if w.Stage == "" {
			w.Stage = StageOff
		}
		def := func(b *Budget, d time.Duration, retries int) {
			if b.Timeout.Duration == 0 {
				b.Timeout.Duration = d
				if b.Retries == 0 {
					b.Retries = retries
				}
			}
		}
		def(&w.Budgets.Create, 30*time.Second, 0)
		def(&w.Budgets.Status, 10*time.Second, 2)
		def(&w.Budgets.Result, 30*time.Second, 2)
		def(&w.Budgets.Reconcile, 10*time.Second, 3)
	}
}

type validator struct {
	root *yaml.Node
	errs Errors
}

// fail records an error at path (e.g. "workflows", 2, "fallback", "kind").
func (v *validator) fail(msg string, path ...any) {
	v.errs = append(v.errs, &Error{Field: fieldName(path), Line: lineOf(v.root, path), Msg: msg})
}

func fieldName(path []any) string {
	var sb strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case int:
			fmt.Fprintf(&sb, "[%d]", p)
		case string:
			if sb.Len() > 0 {
				sb.WriteByte('.')
			}
			sb.WriteString(p)
		}
	}
	return sb.String()
}

// lineOf finds the line of the deepest node along path that exists.
func lineOf(root *yaml.Node, path []any) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						line = n.Content[i].Line
						next = n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

func (c *Config) validate(v *validator) {
	servers := map[string]bool{}
	for i, s := range c.Servers {
		if !namePattern.MatchString(s.Name) {
			v.fail("want a lower-case name (letters, digits, . _ -)", "servers", i, "name")
		} else if servers[s.Name] {
			v.fail(fmt.Sprintf("server %q is defined twice", s.Name), "servers", i, "name")
		}
		servers[s.Name] = true
		switch {
		case s.URL == "":
			v.fail("required", "servers", i, "url")
		case strings.HasPrefix(s.URL, "http://"), strings.HasPrefix(s.URL, "https://"),
			strings.HasPrefix(s.URL, "stdio:"), s.URL == "builtin:demo":
		default:
			v.fail("want an http(s):// URL, stdio:COMMAND or builtin:demo", "servers", i, "url")
		}
		switch s.Era {
		case "auto", "legacy", "extension":
		default:
			v.fail("want auto, legacy or extension", "servers", i, "era")
		}
	}
	owners := map[string]bool{}
	for i, o := range c.Owners {
		if !namePattern.MatchString(o.Name) {
			v.fail("want a lower-case name", "owners", i, "name")
		} else if owners[o.Name] {
			v.fail(fmt.Sprintf("owner %q is defined twice", o.Name), "owners", i, "name")
		}
		owners[o.Name] = true
	}
	tenants := map[string]bool{}
	for i, t := range c.Tenants {
		if !namePattern.MatchString(t) {
			v.fail("want a lower-case tenant name", "tenants", i)
		} else if tenants[t] {
			v.fail(fmt.Sprintf("tenant %q is listed twice", t), "tenants", i)
		}
		tenants[t] = true
	}
	workflows := map[string]bool{}
	for i, w := range c.Workflows {
		at := func(msg string, path ...any) { v.fail(msg, append([]any{"workflows", i}, path...)...) }
		if !namePattern.MatchString(w.Name) {
			at("want a lower-case name", "name")
		} else if workflows[w.Name] {
			at(fmt.Sprintf("workflow %q is defined twice", w.Name), "name")
		}
		workflows[w.Name] = true
		if w.Gate != nil && !servers[w.Gate.Server] {
			at(fmt.Sprintf("gate server %q is not in the servers list", w.Gate.Server), "gate", "server")
		}
		if !servers[w.Server] {
			at(fmt.Sprintf("server %q is not in the servers list", w.Server), "server")
		}
		if w.Tool == "" {
			at("required", "tool")
		}
		switch w.Effect {
		case EffectReadOnly, EffectReversible, EffectEffectful:
		default:
			at("want read_only, reversible or effectful", "effect")
		}
		switch w.TaskUse {
		case TaskRequired, TaskPreferred, TaskNever:
		default:
			at("want required, preferred or never", "task_use")
		}
		switch w.Fallback.Kind {
		case FallbackSync:
			if w.Fallback.MaxDuration.Duration == 0 {
				at("a sync fallback needs max_duration", "fallback", "max_duration")
			}
			if w.TaskUse == TaskRequired && w.Fallback.MaxDuration.Duration > 30*time.Second {
				at("a Task-required workflow may fall back to sync only for short calls (at most 30s)", "fallback", "max_duration")
			}
		case FallbackJobAPI:
			if !strings.HasPrefix(w.Fallback.JobAPI, "http://") && !strings.HasPrefix(w.Fallback.JobAPI, "https://") && w.Fallback.JobAPI != "builtin:demo" {
				at("a job_api fallback needs job_api: an http(s) URL", "fallback", "job_api")
			}
		case FallbackHandoff, FallbackReject:
		default:
			at("want sync, job_api, handoff or reject", "fallback", "kind")
		}
		if w.Concurrency < 0 {
			at("must not be negative", "concurrency")
		}
		switch w.Backpressure {
		case "429", "fallback":
		default:
			at("want 429 or fallback", "backpressure")
		}
		switch w.Stage {
		case StageOff, StageShadow, StageCanary, StageFull:
		default:
			at("want off, shadow, canary or full", "stage")
		}
		if w.CanaryPercent < 0 || w.CanaryPercent > 100 {
			at("want 0 to 100", "canary_percent")
		}
		validateRollout(w.Rollout, at)
		for j, o := range w.Owners {
			if !owners[o] {
				at(fmt.Sprintf("owner %q is not in the owners list", o), "owners", j)
			}
		}
		if len(w.Owners) == 0 {
			at("every workflow needs at least one owner", "owners")
		}
		switch w.Verifier.Kind {
		case "none", "job_api":
		case "http":
			if !strings.HasPrefix(w.Verifier.BaseURL, "http://") && !strings.HasPrefix(w.Verifier.BaseURL, "https://") && w.Verifier.BaseURL != "builtin:demo" {
				at("an http verifier needs base_url: an http(s) URL", "verifier", "base_url")
			}
		default:
			at("want http, job_api or none", "verifier", "kind")
		}
		if w.Verifier.Kind == "job_api" && w.Fallback.Kind != FallbackJobAPI {
			at("a job_api verifier needs a job_api fallback to ask", "verifier", "kind")
		}
		if w.Budgets.Create.Retries != 0 {
			at("the create budget never retries: an originating call is never repeated", "budgets", "create", "retries")
		}
		for name, b := range map[string]Budget{"status": w.Budgets.Status, "result": w.Budgets.Result, "reconcile": w.Budgets.Reconcile} {
			if b.Retries < 0 || b.Retries > 10 {
				at("want 0 to 10", "budgets", name, "retries")
			}
		}
	}
	sort.SliceStable(v.errs, func(i, j int) bool { return v.errs[i].Line < v.errs[j].Line })
}

// Workflow returns the workflow named name.
func (c *Config) Workflow(name string) (*Workflow, bool) {
	for i := range c.Workflows {
		if c.Workflows[i].Name == name {
			return &c.Workflows[i], true
		}
	}
	return nil, false
}

// Server returns the server named name.
func (c *Config) Server(name string) (*Server, bool) {
	for i := range c.Servers {
		if c.Servers[i].Name == name {
			return &c.Servers[i], true
		}
	}
	return nil, false
}
