package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// mcpTarget turns a URL argument into dial options: an http(s) URL, or
// "stdio:COMMAND ARGS..." to start a stdio server.
func mcpTarget(target string, opts *mcpclient.Options) error {
	if cmd, ok := strings.CutPrefix(target, "stdio:"); ok {
		fields := strings.Fields(cmd)
		if len(fields) == 0 {
			return fmt.Errorf("stdio target without a command")
		}
		opts.Command, opts.Args = fields[0], fields[1:]
		return nil
	}
	if !strings.HasPrefix(target, "http://") && !strings.HasPrefix(target, "https://") {
		return fmt.Errorf("target %q: want an http(s) URL or stdio:COMMAND", target)
	}
	opts.URL = target
	return nil
}

// splitArgs separates positional arguments from flags so that flags may
// follow the positionals ("probe URL --token T").
func splitArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) > 0 {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	return pos, nil
}

// runProbe implements "console probe URL [--token T] [--era auto|legacy|extension]".
func runProbe(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stdout)
	token := fs.String("token", "", "bearer token sent as Authorization (never printed)")
	era := fs.String("era", "auto", "era to speak: auto, legacy (2025-11-25) or extension (2026-07-28)")
	var save probeSave
	save.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console probe URL [--token T] [--era auto|legacy|extension] [--save [--server NAME]]")
		fmt.Fprintln(stdout, "Prints, as JSON, the era used, the negotiated protocol version, the server info,")
		fmt.Fprintln(stdout, "capabilities.tasks (or the extension) and every tool with its taskSupport.")
		fmt.Fprintln(stdout, "URL is an http(s) Streamable HTTP endpoint or stdio:COMMAND ARGS...")
		fs.PrintDefaults()
	}
	pos, err := splitArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("probe: want exactly one URL")
	}
	choice, err := mcpclient.ParseEraChoice(*era)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	opts := mcpclient.Options{Token: *token, Era: choice}
	if err := mcpTarget(pos[0], &opts); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	conn, err := mcpclient.Dial(ctx, opts)
	if err != nil {
		return fmt.Errorf("probe %s: %w", pos[0], err)
	}
	defer conn.Close()
	info := conn.Info()
	type toolOut struct {
		Name            string                `json:"name"`
		TaskSupport     mcpclient.TaskSupport `json:"taskSupport"`
		ReadOnlyHint    *bool                 `json:"readOnlyHint,omitempty"`
		DestructiveHint *bool                 `json:"destructiveHint,omitempty"`
		IdempotentHint  *bool                 `json:"idempotentHint,omitempty"`
		InputSchema     json.RawMessage       `json:"inputSchema,omitempty"`
	}
	var tools []toolOut
	for _, t := range conn.Tools() {
		tools = append(tools, toolOut{t.Name, t.TaskSupport, t.ReadOnlyHint, t.DestructiveHint, t.IdempotentHint, t.InputSchema})
	}
	var rawCaps map[string]json.RawMessage
	_ = json.Unmarshal(info.RawCapabilities, &rawCaps)
	out := map[string]any{
		"era":             info.Era,
		"protocolVersion": info.ProtocolVersion,
		"serverInfo":      map[string]string{"name": info.Name, "version": info.Version},
		"taskFlags":       info.Capabilities,
		"evidence":        info.Evidence,
		"tools":           tools,
	}
	if d, ok := conn.(mcpclient.ToolDropper); ok && len(d.DroppedTools()) > 0 {
		out["droppedTools"] = d.DroppedTools()
	}
	if info.Era == mcpclient.EraLegacy {
		out["tasks"] = rawCaps["tasks"]
	} else {
		out["extensions"] = rawCaps["extensions"]
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	return save.run(ctx, pos[0], conn, stdout)
}

// runCall implements "console call URL TOOL --args JSON [--task] [--ttl MS]
// [--token T] [--answer JSON] [--era ...]". It returns nil only when the
// call (or task) completed.
func runCall(ctx context.Context, args []string, stdout io.Writer) (err error) {
	// The input answerer prints from its own goroutine.
	stdout = &lockedWriter{w: stdout}
	fs := flag.NewFlagSet("call", flag.ContinueOnError)
	fs.SetOutput(stdout)
	argsJSON := fs.String("args", "{}", "tool arguments as a JSON object")
	asTask := fs.Bool("task", false, "run the call as a task (task route)")
	ttl := fs.Int64("ttl", 0, "requested task ttl in milliseconds (legacy era; the server may replace it)")
	token := fs.String("token", "", "bearer token sent as Authorization (never printed)")
	answer := fs.String("answer", "", "JSON object to accept an elicitation with (without it, elicitations are declined)")
	era := fs.String("era", "auto", "era to speak: auto, legacy (2025-11-25) or extension (2026-07-28)")
	timeout := fs.Duration("timeout", 0, "overall deadline of the call, dial included (default: the --ttl when given, else 10m)")
	fs.Usage = func() {
		fmt.Fprintln(stdout, "usage: console call URL TOOL --args JSON [--task] [--ttl MS] [--timeout DURATION] [--token T] [--answer JSON] [--era auto|legacy|extension]")
		fmt.Fprintln(stdout, "Runs one call to the end, printing each observed status on its own line")
		fmt.Fprintln(stdout, "(status working, status input_required, ...), answering an elicitation with --answer,")
		fmt.Fprintln(stdout, "and printing the final result as JSON. Succeeds only when the task completed.")
		fs.PrintDefaults()
	}
	pos, err := splitArgs(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return fmt.Errorf("call: want URL and TOOL")
	}
	var toolArgs map[string]any
	if err := json.Unmarshal([]byte(*argsJSON), &toolArgs); err != nil {
		return fmt.Errorf("call: --args is not a JSON object: %w", err)
	}
	var answerContent map[string]any
	if *answer != "" {
		if err := json.Unmarshal([]byte(*answer), &answerContent); err != nil {
			return fmt.Errorf("call: --answer is not a JSON object: %w", err)
		}
	}
	choice, err := mcpclient.ParseEraChoice(*era)
	if err != nil {
		return fmt.Errorf("call: %w", err)
	}
	if *ttl < 0 {
		return fmt.Errorf("call: --ttl must not be negative")
	}
	deadline := callDeadline(*timeout, *ttl)
	if deadline <= 0 {
		return fmt.Errorf("call: --timeout must be positive")
	}
	ctx, cancelDeadline := context.WithTimeoutCause(ctx, deadline, errCallDeadline)
	defer cancelDeadline()
	defer func() {
		if err != nil && errors.Is(context.Cause(ctx), errCallDeadline) {
			err = fmt.Errorf("call %s: no outcome within --timeout %s: %w", pos[1], deadline, errCallDeadline)
		}
	}()
	respond := func(r mcpclient.InputRequest) mcpclient.InputResponse {
		if answerContent == nil {
			return mcpclient.InputResponse{Action: mcpclient.ActionDecline}
		}
		return mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: withSchemaDefaults(r.RawSchema, answerContent)}
	}
	inputs := make(chan mcpclient.InputRequest, 16)
	opts := mcpclient.Options{Token: *token, Era: choice, OnInput: func(r mcpclient.InputRequest) {
		select {
		case inputs <- r:
		default:
		}
	}}
	if err := mcpTarget(pos[0], &opts); err != nil {
		return fmt.Errorf("call: %w", err)
	}
	conn, err := mcpclient.Dial(ctx, opts)
	if err != nil {
		return fmt.Errorf("call %s: %w", pos[0], err)
	}
	defer conn.Close()
	fmt.Fprintf(stdout, "era %s\n", conn.Info().Era)
	printJSON := func(v any) error {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	printOutcome := func(o *mcpclient.Outcome) error {
		v, err := outcomeJSON(o)
		if err != nil {
			return err
		}
		return printJSON(v)
	}
	tool := pos[1]
	callOpts := mcpclient.CallOptions{Answer: func(ctx context.Context, r mcpclient.InputRequest) (mcpclient.InputResponse, error) {
		fmt.Fprintf(stdout, "input %s %s\n", r.Key, r.Message)
		return respond(r), nil
	}}
	// Answer every input request as it is announced (task inputs, and
	// elicitations a legacy server sends during a plain call).
	var answering sync.WaitGroup
	defer answering.Wait() // after stopAnswers: nothing prints once call returns
	answerCtx, stopAnswers := context.WithCancel(ctx)
	defer stopAnswers()
	answering.Add(1)
	go func() {
		defer answering.Done()
		for {
			select {
			case r := <-inputs:
				fmt.Fprintf(stdout, "input %s %s\n", r.Key, r.Message)
				if err := conn.AnswerInput(answerCtx, r.TaskID, r.Key, respond(r)); err != nil {
					fmt.Fprintf(stdout, "input %s not answered: %v\n", r.Key, err)
				}
			case <-answerCtx.Done():
				return
			}
		}
	}()

	if !*asTask {
		res, err := conn.CallTool(ctx, tool, toolArgs, callOpts)
		if err != nil {
			return fmt.Errorf("call %s: %w", tool, err)
		}
		if err := printJSON(res); err != nil {
			return err
		}
		if res.IsError {
			return fmt.Errorf("call %s: the tool reported an error (isError)", tool)
		}
		return nil
	}
	task, err := conn.CreateTask(ctx, tool, toolArgs, mcpclient.TaskOptions{CallOptions: callOpts, TTL: time.Duration(*ttl) * time.Millisecond})
	if err != nil {
		return fmt.Errorf("call %s: %w", tool, err)
	}
	fmt.Fprintf(stdout, "task %s\n", task.ID)
	fmt.Fprintf(stdout, "status %s\n", task.Status)

	last := task.Status
	var outcome *mcpclient.Outcome
	awaiting := false
	results := make(chan outcomeOrErr, 1)
	for attempt := 0; outcome == nil; attempt++ {
		if last.Terminal() || last == mcpclient.StatusInputRequired || conn.Info().Era == mcpclient.EraExtension {
			if !awaiting && conn.Info().Era == mcpclient.EraLegacy {
				// Legacy input and results come through tasks/result.
				awaiting = true
				go func() {
					o, err := conn.AwaitOutcome(ctx, task.ID)
					results <- outcomeOrErr{o, err}
				}()
			}
		}
		snap, err := conn.GetTask(ctx, task.ID)
		if err != nil {
			return fmt.Errorf("call %s: task %s: %w", tool, task.ID, err)
		}
		if snap.Violation != nil {
			fmt.Fprintf(stdout, "violation %v\n", snap.Violation)
		}
		if snap.Task.Status != last {
			last = snap.Task.Status
			fmt.Fprintf(stdout, "status %s\n", last)
		}
		if snap.Outcome != nil {
			outcome = snap.Outcome
			break
		}
		delay := pollDelay(snap.Task.PollInterval)
		select {
		case r := <-results:
			if r.err != nil {
				return fmt.Errorf("call %s: task %s: %w", tool, task.ID, r.err)
			}
			outcome = &r.o
		case <-time.After(delay):
		case <-ctx.Done():
			return fmt.Errorf("call %s: task %s: %w", tool, task.ID, ctx.Err())
		}
	}
	if outcome.Status != last {
		fmt.Fprintf(stdout, "status %s\n", outcome.Status)
	}
	if err := printOutcome(outcome); err != nil {
		return err
	}
	if outcome.Status != mcpclient.StatusCompleted {
		return fmt.Errorf("call %s: task %s ended %s", tool, task.ID, outcome.Describe())
	}
	if outcome.ToolError {
		return fmt.Errorf("call %s: task %s ended %s", tool, task.ID, outcome.Describe())
	}
	return nil
}

// withSchemaDefaults fills the fields of an elicitation answer the operator
// left out with the defaults the requested schema declares.
func withSchemaDefaults(schema json.RawMessage, content map[string]any) map[string]any {
	var s struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
	}
	out := make(map[string]any, len(content))
	if json.Unmarshal(schema, &s) == nil {
		for name, p := range s.Properties {
			if p.Default != nil {
				out[name] = p.Default
			}
		}
	}
	for k, v := range content {
		out[k] = v
	}
	return out
}

// errCallDeadline is the cause when console call runs out of --timeout.
var errCallDeadline = errors.New("call deadline exceeded")

// callDeadline is the overall deadline of console call: --timeout, else the
// requested ttl, else 10 minutes.
func callDeadline(timeout time.Duration, ttlMS int64) time.Duration {
	switch {
	case timeout != 0:
		return timeout
	case ttlMS > 0:
		return time.Duration(ttlMS) * time.Millisecond
	}
	return 10 * time.Minute
}

// pollDelay is the wait before the next tasks/get: the server's suggested
// pollInterval (bounded to 50 ms – 1 min), or 250 ms when it suggested none.
func pollDelay(suggested time.Duration) time.Duration {
	switch {
	case suggested <= 0:
		return 250 * time.Millisecond
	case suggested < 50*time.Millisecond:
		return 50 * time.Millisecond
	case suggested > time.Minute:
		return time.Minute
	}
	return suggested
}

// outcomeJSON is the outcome as console call prints it: the task's ttl and
// pollInterval in milliseconds, under their wire names.
func outcomeJSON(o *mcpclient.Outcome) (any, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if o.Task != nil {
		t, _ := m["task"].(map[string]any)
		if t != nil {
			delete(t, "ttl")
			delete(t, "pollInterval")
			if o.Task.TTL != nil {
				t["ttl"] = o.Task.TTL.Milliseconds()
			}
			if o.Task.PollInterval > 0 {
				t["pollInterval"] = o.Task.PollInterval.Milliseconds()
			}
		}
	}
	return m, nil
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// outcomeOrErr carries an AwaitOutcome answer across a channel.
type outcomeOrErr struct {
	o   mcpclient.Outcome
	err error
}
