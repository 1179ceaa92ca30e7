package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/taskgate/taskgate/receiver"
)

// receiverEnv, when set, makes this binary run the reference receiver on the address it names
// instead of the soak (the soak starts itself again as its receiver process).
const receiverEnv = "TASKGATE_SOAK_RECEIVER"

// receiverTokensEnv holds the receiver child's TOKEN=TENANT:ACTOR bindings, comma-separated.
const receiverTokensEnv = "TASKGATE_SOAK_RECEIVER_TOKENS" //nolint:gosec // the name of an environment variable, not a credential

// rcvState is what one receiver process saw, read at the end of the run or when it is stopped:
// the counts the soak's invariants are checked against.
type rcvState struct {
	// ToolCallsByKey counts tools/call requests per idempotency key (operation id or the
	// idempotency argument).
	ToolCallsByKey map[string]int `json:"tool_calls_by_key"`
	// Applied lists the keys whose effect this process's system of record applied.
	Applied []string `json:"applied"`
	// EffectsRefused counts effects refused because their key was applied already.
	EffectsRefused int `json:"effects_refused"`
	// JobSubmits counts POST /jobs per Idempotency-Key.
	JobSubmits map[string]int `json:"job_submits"`
	// LastGet is when each task id was last read with tasks/get.
	LastGet map[string]time.Time `json:"last_get"`
	// Answers counts deliveries of each answer: a JSON-RPC response to one of the server's
	// requests (per session and request id) or a tasks/update input response (per task and
	// input key).
	Answers map[string]int `json:"answers"`
	// TasksCreated counts tasks created.
	TasksCreated int `json:"tasks_created"`
}

// counting wraps the receiver's handler and counts what the invariants need.
type counting struct {
	next    http.Handler
	mu      sync.Mutex
	lastGet map[string]time.Time
	answers map[string]int
	jobs    map[string]int
}

func (c *counting) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodPost && req.URL.Path == "/jobs" {
		c.mu.Lock()
		c.jobs[req.Header.Get("Idempotency-Key")]++
		c.mu.Unlock()
	}
	if req.Method == http.MethodPost && req.URL.Path == "/mcp" {
		body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		c.observe(req.Header.Get("Mcp-Session-Id"), body)
	}
	c.next.ServeHTTP(w, req)
}

func (c *counting) observe(session string, body []byte) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			TaskID         string                     `json:"taskId"`
			InputResponses map[string]json.RawMessage `json:"inputResponses"`
		} `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &m) != nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case m.Method == "tasks/get" && m.Params.TaskID != "":
		c.lastGet[m.Params.TaskID] = now
	case m.Method == "tasks/update":
		for k := range m.Params.InputResponses {
			c.answers["update "+m.Params.TaskID+" "+k]++
		}
	case m.Method == "" && len(m.ID) > 0 && (len(m.Result) > 0 || len(m.Error) > 0):
		c.answers["response "+session+" "+string(m.ID)]++
	}
}

func (c *counting) state(r *receiver.Receiver) rcvState {
	cs := r.Counters()
	st := rcvState{ToolCallsByKey: cs.ToolCallsByKey, EffectsRefused: cs.EffectsRefused, TasksCreated: cs.TasksCreated}
	for k := range cs.ToolCallsByKey {
		if rec, ok := r.Records().Get(k); ok && rec.Status == receiver.RecordApplied {
			st.Applied = append(st.Applied, k)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.LastGet = make(map[string]time.Time, len(c.lastGet))
	for k, v := range c.lastGet {
		st.LastGet[k] = v
	}
	st.Answers = make(map[string]int, len(c.answers))
	for k, v := range c.answers {
		st.Answers[k] = v
	}
	st.JobSubmits = make(map[string]int, len(c.jobs))
	for k, v := range c.jobs {
		st.JobSubmits[k] = v
	}
	return st
}

// runReceiverChild is the receiver process. It listens on addr, prints "listening ADDR",
// serves GET /soak/state, and on SIGTERM stops serving, prints "state JSON" and exits.
func runReceiverChild(addr string, stdout io.Writer) error {
	cfg := receiver.Config{DefaultPollInterval: 500 * time.Millisecond, MaxConcurrentTasks: -1,
		DefaultTTL: time.Hour, MaxTTL: 2 * time.Hour, Tokens: map[string]receiver.Identity{}}
	for _, b := range strings.Split(os.Getenv(receiverTokensEnv), ",") {
		tok, who, ok := strings.Cut(b, "=")
		tenant, actor, ok2 := strings.Cut(who, ":")
		if ok && ok2 {
			cfg.Tokens[tok] = receiver.Identity{Tenant: tenant, Actor: actor}
		}
	}
	r := receiver.New(cfg)
	defer r.Close()
	c := &counting{next: r.Handler(), lastGet: map[string]time.Time{}, answers: map[string]int{}, jobs: map[string]int{}}
	mux := http.NewServeMux()
	mux.Handle("/", c)
	mux.HandleFunc("GET /soak/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(c.state(r))
	})
	var ln net.Listener
	var err error
	for range 50 { // the port may still be held by the previous process for a moment
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	fmt.Fprintf(stdout, "listening %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-sig:
	}
	_ = srv.Close() // every request counted so far is in the state; open streams end
	b, err := json.Marshal(c.state(r))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "state %s\n", b)
	return nil
}

// receiverProc is a running receiver child.
type receiverProc struct {
	cmd   *exec.Cmd
	lines chan string
}

// startReceiver starts this binary again as the receiver on addr.
// tokens, when not empty, are TOKEN=TENANT:ACTOR bindings the receiver requires.
func startReceiver(ctx context.Context, addr, tokens string) (*receiverProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Not tied to ctx: the receiver lives until stop, which collects what it saw.
	cmd := exec.CommandContext(context.WithoutCancel(ctx), self) //nolint:gosec // this very binary, started again as its receiver
	cmd.Env = append(os.Environ(), receiverEnv+"="+addr, receiverTokensEnv+"="+tokens)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	p := &receiverProc{cmd: cmd, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, "listening ") {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("receiver did not start: %q", l)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, errors.New("receiver did not start within 30s")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, ctx.Err()
	}
	return p, nil
}

// stop stops the receiver (its tasks vanish with it) and returns what it saw.
func (p *receiverProc) stop() (rcvState, error) {
	var st rcvState
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				_ = p.cmd.Wait()
				return st, errors.New("the receiver ended without its state")
			}
			if b, found := strings.CutPrefix(l, "state "); found {
				err := json.Unmarshal([]byte(b), &st)
				_ = p.cmd.Wait()
				return st, err
			}
		case <-timeout:
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
			return st, errors.New("the receiver did not stop within 30s")
		}
	}
}
