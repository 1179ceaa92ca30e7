package mcpclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/taskgate/taskgate/mcpclient"
)

// Peer: a server built on mcp-go v1.2.1's own task support. What it does
// differently from the 2025-11-25 spec (and the client tolerates):
//   - it answers server/discover (it implements the 2026-07-28 core) but
//     advertises the legacy capabilities.tasks there, so it is a legacy-era
//     Tasks server;
//   - it reports a tool's isError result as status "completed" (spec: failed);
//   - it omits "ttl" instead of sending null when no ttl was requested;
//   - it never sets input_required: elicitation from a task handler goes out
//     on the GET stream (HTTP) or the pipe (stdio) with whatever _meta the
//     handler adds;
//   - it cancels a task's context when the creating request returns
//     (upstream issue #897), so handlers here detach with context.WithoutCancel.

const stdioPeerEnv = "MCPCLIENT_STDIO_PEER"

func TestMain(m *testing.M) {
	serveReceiverStdioIfAsked() // re-executed as the reference receiver on stdio
	serveFakeDiscoverIfAsked()  // re-executed as a server/discover-refusing fake
	serveEraFakeIfAsked()       // re-executed as the scripted era fake
	if os.Getenv(stdioPeerEnv) == "1" {
		// Re-executed test binary: serve the mcp-go peer on stdio.
		p := newMCPGoPeer(nil)
		if err := server.ServeStdio(p.srv); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// mcpGoPeer is an mcp-go v1.2.1 server with tools in every task mode.
type mcpGoPeer struct {
	srv     *server.MCPServer
	askTask chan string   // the test tells the "ask" handler its task id
	release chan struct{} // closed at cleanup: ends "hang" handlers
	answers chan string   // what "ask" received
	// streamOpen is closed once a client opened the GET event stream and its session is
	// registered with the server. mcp-go registers a session after answering its initialize
	// (or when its GET stream comes first), and a notification for a session not registered
	// yet is dropped: a task ending in between would never be reported.
	streamOpen chan struct{}
	streamMu   sync.Mutex
	gotGet     bool
	registered bool
}

// streamEvent records a GET arriving or a session registering, and closes streamOpen once
// both happened.
func (p *mcpGoPeer) streamEvent(get bool) {
	p.streamMu.Lock()
	defer p.streamMu.Unlock()
	was := p.gotGet && p.registered
	if get {
		p.gotGet = true
	} else {
		p.registered = true
	}
	if !was && p.gotGet && p.registered {
		close(p.streamOpen)
	}
}

// handler serves the peer over Streamable HTTP and signals streamOpen.
func (p *mcpGoPeer) handler() http.Handler {
	inner := server.NewStreamableHTTPServer(p.srv)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			p.streamEvent(true)
		}
		inner.ServeHTTP(w, r)
	})
}

func newMCPGoPeer(tb testing.TB, opts ...server.ServerOption) *mcpGoPeer {
	p := &mcpGoPeer{askTask: make(chan string, 1), release: make(chan struct{}), answers: make(chan string, 1),
		streamOpen: make(chan struct{})}
	if tb != nil {
		tb.Cleanup(func() { close(p.release) })
	}
	hooks := &server.Hooks{}
	hooks.AddOnRegisterSession(func(context.Context, server.ClientSession) { p.streamEvent(false) })
	base := []server.ServerOption{server.WithToolCapabilities(false), server.WithTaskCapabilities(true, true, true), server.WithElicitation(),
		server.WithHooks(hooks)}
	p.srv = server.NewMCPServer("mcpgo-peer", "1.2.1", append(base, opts...)...)
	text := func(s string) *mcp.CallToolResult { return mcp.NewToolResultText(s) }
	p.srv.AddTool(mcp.NewTool("echo", mcp.WithString("text"), mcp.WithReadOnlyHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("echo " + req.GetString("text", "")), nil
		})
	p.srv.AddTool(mcp.NewTool("report", mcp.WithTaskSupport(mcp.TaskSupportOptional), mcp.WithDestructiveHintAnnotation(false),
		mcp.WithIdempotentHintAnnotation(true)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if req.GetBool("fail", false) {
				return mcp.NewToolResultError("report failed"), nil
			}
			if req.GetBool("rpcError", false) {
				return nil, fmt.Errorf("report exploded")
			}
			return text("report " + req.GetString("month", "")), nil
		})
	p.srv.AddTool(mcp.NewTool("must", mcp.WithTaskSupport(mcp.TaskSupportRequired)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("must done"), nil
		})
	p.srv.AddTool(mcp.NewTool("hang", mcp.WithTaskSupport(mcp.TaskSupportRequired)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-p.release:
			case <-time.After(time.Minute):
			}
			return text("hang ended"), nil
		})
	p.srv.AddTool(mcp.NewTool("ask", mcp.WithTaskSupport(mcp.TaskSupportRequired)),
		func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			ctx = context.WithoutCancel(ctx) // upstream #897
			var taskID string
			select {
			case taskID = <-p.askTask:
			case <-time.After(30 * time.Second):
				return nil, fmt.Errorf("no task id")
			}
			res, err := p.srv.RequestElicitation(ctx, mcp.ElicitationRequest{Params: mcp.ElicitationParams{
				Meta:            mcp.WithRelatedTask(taskID),
				Message:         "Overwrite\x07 the report?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}},
			}})
			if err != nil {
				return nil, err
			}
			b, _ := json.Marshal(res.Content)
			select {
			case p.answers <- string(res.Action) + " " + string(b):
			default:
			}
			return text("asked " + string(res.Action) + " " + string(b)), nil
		})
	return p
}

// peerTransport names how a test reaches the mcp-go peer.
type peerTransport string

const (
	overHTTP  peerTransport = "http"
	overStdio peerTransport = "stdio"
)

// dialMCPGo starts the peer and dials it.
func dialMCPGo(tb testing.TB, via peerTransport, opts mcpclient.Options) (mcpclient.Conn, *mcpGoPeer) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var peer *mcpGoPeer
	switch via {
	case overHTTP:
		peer = newMCPGoPeer(tb)
		ts := httptest.NewServer(peer.handler())
		tb.Cleanup(ts.Close)
		opts.URL = ts.URL
	case overStdio:
		opts.Command = os.Args[0]
		opts.Args = []string{"-test.run=^$"}
		opts.Env = []string{stdioPeerEnv + "=1"}
	}
	conn, err := mcpclient.Dial(ctx, opts)
	if err != nil {
		tb.Fatalf("dial mcp-go peer over %s: %v", via, err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn, peer
}

func both(t *testing.T, f func(t *testing.T, via peerTransport)) {
	for _, via := range []peerTransport{overHTTP, overStdio} {
		t.Run(string(via), func(t *testing.T) {
			t.Parallel()
			f(t, via)
		})
	}
}

func ctxT(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

func TestMCPGoDialReadsHandshakeAndTools(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, via peerTransport) {
		conn, _ := dialMCPGo(t, via, mcpclient.Options{})
		info := conn.Info()
		if info.Era != mcpclient.EraLegacy || info.ProtocolVersion != "2025-11-25" {
			t.Fatalf("era %s version %s, want legacy 2025-11-25", info.Era, info.ProtocolVersion)
		}
		if info.Name != "mcpgo-peer" || info.Version != "1.2.1" {
			t.Errorf("server info %q %q", info.Name, info.Version)
		}
		c := info.Capabilities
		if !c.Known || !c.Tasks || !c.TasksList || !c.TasksCancel || !c.TasksToolsCall || c.Extension {
			t.Errorf("capabilities %+v", c)
		}
		if !json.Valid(info.RawCapabilities) || !strings.Contains(string(info.RawCapabilities), `"tasks"`) {
			t.Errorf("raw capabilities %s", info.RawCapabilities)
		}
		// mcp-go answers server/discover but advertises capabilities.tasks.
		if ev := info.Evidence; ev.Method != "server/discover" || ev.Era != mcpclient.EraLegacy || !strings.Contains(ev.Answer, "capabilities.tasks") {
			t.Errorf("evidence %+v", ev)
		}
		if via == overHTTP && info.SessionID == "" {
			t.Error("no Mcp-Session-Id over HTTP")
		}
		want := map[string]mcpclient.TaskSupport{"echo": mcpclient.TaskForbidden, "report": mcpclient.TaskOptional,
			"must": mcpclient.TaskRequired, "hang": mcpclient.TaskRequired, "ask": mcpclient.TaskRequired}
		got := map[string]mcpclient.Tool{}
		for _, tl := range conn.Tools() {
			got[tl.Name] = tl
		}
		for name, ts := range want {
			if got[name].TaskSupport != ts {
				t.Errorf("tool %s taskSupport %q, want %q", name, got[name].TaskSupport, ts)
			}
		}
		if h := got["echo"].ReadOnlyHint; h == nil || !*h {
			t.Error("echo readOnlyHint not read")
		}
		if h := got["report"].IdempotentHint; h == nil || !*h {
			t.Error("report idempotentHint not read")
		}
	})
}

func TestMCPGoRefusals(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, via peerTransport) {
		conn, _ := dialMCPGo(t, via, mcpclient.Options{})
		ctx := ctxT(t, 10*time.Second)
		cases := []struct {
			name string
			err  error
			run  func() error
		}{
			{"task augmentation of a forbidden tool", mcpclient.ErrToolForbidsTask, func() error {
				_, err := conn.CreateTask(ctx, "echo", nil, mcpclient.TaskOptions{})
				return err
			}},
			{"plain call to a required tool", mcpclient.ErrToolRequiresTask, func() error {
				_, err := conn.CallTool(ctx, "must", nil, mcpclient.CallOptions{})
				return err
			}},
			{"task for an unlisted tool", mcpclient.ErrUnknownTool, func() error {
				_, err := conn.CreateTask(ctx, "nope", nil, mcpclient.TaskOptions{})
				return err
			}},
			{"get of an unknown task", mcpclient.ErrUnknownTask, func() error {
				_, err := conn.GetTask(ctx, "no-such-task")
				return err
			}},
		}
		for _, tc := range cases {
			if err := tc.run(); !errorsIs(err, tc.err) {
				t.Errorf("%s: got %v, want %v", tc.name, err, tc.err)
			}
		}
	})
}

func TestMCPGoRefusesTasksWithoutCapability(t *testing.T) {
	t.Parallel()
	peer := newMCPGoPeer(t, server.WithTaskCapabilities(false, false, false))
	ts := httptest.NewServer(server.NewStreamableHTTPServer(peer.srv))
	t.Cleanup(ts.Close)
	ctx := ctxT(t, 10*time.Second)
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: ts.URL, Era: mcpclient.EraChoiceLegacy})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.CreateTask(ctx, "report", nil, mcpclient.TaskOptions{}); !errorsIs(err, mcpclient.ErrTasksNotAdvertised) {
		t.Errorf("create without capability: %v", err)
	}
	if _, err := conn.ListTasks(ctx, ""); !errorsIs(err, mcpclient.ErrNotSupported) {
		t.Errorf("list without capability: %v", err)
	}
	if _, err := conn.CancelTask(ctx, "x"); !errorsIs(err, mcpclient.ErrNotSupported) {
		t.Errorf("cancel without capability: %v", err)
	}
	// A plain call of an optional tool still works.
	res, err := conn.CallTool(ctx, "report", map[string]any{"month": "2025-10"}, mcpclient.CallOptions{})
	if err != nil || len(res.Texts()) != 1 || res.Texts()[0] != "report 2025-10" {
		t.Errorf("plain call: %v %v", res, err)
	}
}

func TestMCPGoTaskLifecycle(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, via peerTransport) {
		var mu sync.Mutex
		notified := map[string]mcpclient.Status{}
		done := make(chan struct{}, 8)
		conn, peer := dialMCPGo(t, via, mcpclient.Options{OnStatus: func(s mcpclient.Snapshot) {
			mu.Lock()
			notified[s.Task.ID] = s.Task.Status
			mu.Unlock()
			if s.Task.Status.Terminal() {
				done <- struct{}{}
			}
		}})
		ctx := ctxT(t, 15*time.Second)
		if peer != nil {
			// Status notifications travel on the GET stream: wait until it is open.
			select {
			case <-peer.streamOpen:
			case <-ctx.Done():
				t.Fatal("the client never opened the GET event stream")
			}
		}

		task, err := conn.CreateTask(ctx, "report", map[string]any{"month": "2025-10"}, mcpclient.TaskOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if task.ID == "" || task.Status != mcpclient.StatusWorking || task.Era != mcpclient.EraLegacy {
			t.Fatalf("created %+v", task)
		}
		if task.TTL == nil || *task.TTL != time.Minute {
			t.Errorf("granted ttl %v, want the requested minute", task.TTL)
		}
		out, err := conn.AwaitOutcome(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != mcpclient.StatusCompleted || out.ToolError || out.Result == nil || out.Result.Texts()[0] != "report 2025-10" {
			t.Fatalf("outcome %+v", out)
		}
		snap, err := conn.GetTask(ctx, task.ID)
		if err != nil || snap.Task.Status != mcpclient.StatusCompleted || snap.Violation != nil || snap.Outcome != nil {
			t.Fatalf("get after completion %+v %v", snap, err)
		}
		// notifications/tasks/status reaches OnStatus (GET stream / pipe).
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("no terminal status notification")
		}
		mu.Lock()
		if notified[task.ID] != mcpclient.StatusCompleted {
			t.Errorf("notified %v", notified)
		}
		mu.Unlock()

		// mcp-go reports an isError tool result as "completed".
		failing, err := conn.CreateTask(ctx, "report", map[string]any{"fail": true}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err = conn.AwaitOutcome(ctx, failing.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !out.ToolError || out.Status != mcpclient.StatusCompleted || out.Describe() != "completed — tool error" {
			t.Errorf("isError outcome %+v (%s)", out, out.Describe())
		}
		// A JSON-RPC error during execution: failed with the error.
		broken, err := conn.CreateTask(ctx, "report", map[string]any{"rpcError": true}, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out, err = conn.AwaitOutcome(ctx, broken.ID)
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != mcpclient.StatusFailed || out.Error == nil {
			t.Errorf("error outcome %+v", out)
		}
	})
}

func TestMCPGoCancelListAndAbandon(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, via peerTransport) {
		conn, _ := dialMCPGo(t, via, mcpclient.Options{})
		ctx := ctxT(t, 15*time.Second)
		task, err := conn.CreateTask(ctx, "hang", nil, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// tasks/result is abandonable: the wait ends, the task does not.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = conn.AwaitOutcome(short, task.ID)
		cancel()
		if !errorsIs(err, context.DeadlineExceeded) {
			t.Fatalf("abandoned wait: %v", err)
		}
		snap, err := conn.GetTask(ctx, task.ID)
		if err != nil || snap.Task.Status != mcpclient.StatusWorking {
			t.Fatalf("polling after abandon: %+v %v", snap, err)
		}
		other, err := conn.CreateTask(ctx, "must", nil, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		cursor := ""
		for i := 0; i < 100; i++ {
			page, err := conn.ListTasks(ctx, cursor)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range page.Tasks {
				seen[tk.ID] = true
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if !seen[task.ID] || !seen[other.ID] {
			t.Errorf("tasks/list missed tasks: %v", seen)
		}
		res, err := conn.CancelTask(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if res.Task == nil || res.Task.Status != mcpclient.StatusCancelled || res.Acknowledged {
			t.Fatalf("cancel result %+v", res)
		}
		snap, err = conn.GetTask(ctx, task.ID)
		if err != nil || snap.Task.Status != mcpclient.StatusCancelled || snap.Violation != nil {
			t.Fatalf("after cancel %+v %v", snap, err)
		}
		// Cancelling a terminal task is -32602, told apart from an unknown id.
		if _, err := conn.CancelTask(ctx, task.ID); !errorsIs(err, mcpclient.ErrTaskTerminal) || errorsIs(err, mcpclient.ErrUnknownTask) {
			t.Errorf("second cancel: %v", err)
		}
	})
}

func TestMCPGoElicitationRoutedByTask(t *testing.T) {
	t.Parallel()
	both(t, func(t *testing.T, via peerTransport) {
		if via == overStdio {
			t.Skip("the stdio peer runs in another process; the test cannot hand it the task id")
		}
		inputs := make(chan mcpclient.InputRequest, 4)
		conn, peer := dialMCPGo(t, via, mcpclient.Options{OnInput: func(r mcpclient.InputRequest) { inputs <- r }})
		ctx := ctxT(t, 15*time.Second)
		task, err := conn.CreateTask(ctx, "ask", nil, mcpclient.TaskOptions{})
		if err != nil {
			t.Fatal(err)
		}
		peer.askTask <- task.ID
		var req mcpclient.InputRequest
		select {
		case req = <-inputs:
		case <-ctx.Done():
			t.Fatal("no elicitation arrived")
		}
		if req.TaskID != task.ID || req.Mode != mcpclient.InputForm || req.Message != "Overwrite the report?" ||
			len(req.RequestedSchema) != 1 || req.RequestedSchema[0] != (mcpclient.SchemaField{Name: "ok", Type: "boolean", Required: true}) {
			t.Fatalf("input request %+v", req)
		}
		if got := conn.PendingInput(task.ID); len(got) != 1 || got[0].Key != req.Key {
			t.Fatalf("pending %+v", got)
		}
		if err := conn.AnswerInput(ctx, task.ID, req.Key, mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"ok": true}}); err != nil {
			t.Fatal(err)
		}
		if err := conn.AnswerInput(ctx, task.ID, req.Key, mcpclient.InputResponse{Action: mcpclient.ActionDecline}); !errorsIs(err, mcpclient.ErrInputAnswered) {
			t.Errorf("second answer: %v", err)
		}
		out, err := conn.AwaitOutcome(ctx, task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != mcpclient.StatusCompleted || out.Result.Texts()[0] != `asked accept {"ok":true}` {
			t.Fatalf("outcome %+v", out)
		}
	})
}

func TestMCPGoResumeSessionAndSessionGone(t *testing.T) {
	t.Parallel()
	peer := newMCPGoPeer(t)
	ts := httptest.NewServer(server.NewStreamableHTTPServer(peer.srv))
	t.Cleanup(ts.Close)
	ctx := ctxT(t, 15*time.Second)
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	task, err := conn.CreateTask(ctx, "hang", nil, mcpclient.TaskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info := conn.Info()
	resumed, err := mcpclient.Dial(ctx, mcpclient.Options{URL: ts.URL, Resume: &mcpclient.Resume{
		SessionID: info.SessionID, Capabilities: info.RawCapabilities, ServerName: info.Name, ServerVersion: info.Version}})
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if got := resumed.Info(); got.SessionID != info.SessionID || !got.Capabilities.TasksCancel || !got.Evidence.Forced {
		t.Fatalf("resumed info %+v", got)
	}
	resumed.Seed(task.ID, mcpclient.StatusWorking)
	snap, err := resumed.GetTask(ctx, task.ID)
	if err != nil || snap.Task.Status != mcpclient.StatusWorking {
		t.Fatalf("observe on the resumed session: %+v %v", snap, err)
	}
	if _, err := resumed.CancelTask(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	// A session the server never knew (or forgot): HTTP 404 → ErrSessionGone.
	_, err = mcpclient.Dial(ctx, mcpclient.Options{URL: ts.URL, Resume: &mcpclient.Resume{SessionID: "mcp-session-forgotten"}})
	if !errorsIs(err, mcpclient.ErrSessionGone) {
		t.Fatalf("forgotten session: %v", err)
	}
}

// TestMCPGoCreateUnacknowledged cuts the connection after the server read a
// task-augmented tools/call and before any answer: the client reports the
// creation as unacknowledged and never resends it.
func TestMCPGoCreateUnacknowledged(t *testing.T) {
	t.Parallel()
	peer := newMCPGoPeer(t)
	inner := server.NewStreamableHTTPServer(peer.srv)
	var mu sync.Mutex
	calls := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body := make([]byte, 1<<16)
			n, _ := r.Body.Read(body)
			body = body[:n]
			if strings.Contains(string(body), `"tools/call"`) && strings.Contains(string(body), `"task"`) {
				mu.Lock()
				calls++
				mu.Unlock()
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					conn.Close()
				}
				return
			}
			r.Body = ioNopCloser(strings.NewReader(string(body)))
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	ctx := ctxT(t, 10*time.Second)
	conn, err := mcpclient.Dial(ctx, mcpclient.Options{URL: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = conn.CreateTask(ctx, "report", nil, mcpclient.TaskOptions{})
	if !errorsIs(err, mcpclient.ErrCreateUnacknowledged) || !errorsIs(err, mcpclient.ErrTransportLost) {
		t.Fatalf("create over a cut connection: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("tools/call reached the server %d times, want exactly 1 (never resent)", calls)
	}
	// A refused connection is "not delivered", never "unacknowledged".
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	if _, err := mcpclient.Dial(ctx, mcpclient.Options{URL: deadURL}); !errorsIs(err, mcpclient.ErrNotDelivered) {
		t.Errorf("dial of a closed port: %v", err)
	}
}
