package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Task support modes of a tool (2025-11-25 execution.taskSupport).
const (
	SupportForbidden = "forbidden"
	SupportOptional  = "optional"
	SupportRequired  = "required"
)

// Outcomes a scripted tool can be told to end with (argument "outcome").
const (
	OutcomeComplete  = "complete"   // a normal result
	OutcomeToolError = "tool_error" // an isError result
	OutcomeRPCError  = "rpc_error"  // a JSON-RPC error
	OutcomeInput     = "input"      // ask for input by elicitation, then complete
	OutcomeHang      = "hang"       // never end until cancelled
)

// Tool names. The work_* tools are scripted by their arguments; the others
// are the fixtures the conformance suite's tasks-* scenarios name.
const (
	ToolWorkForbidden    = "work_forbidden"
	ToolWorkOptional     = "work_optional"
	ToolWorkRequired     = "work_required"
	ToolGreet            = "greet"
	ToolSlowCompute      = "slow_compute"
	ToolFailingJob       = "failing_job"
	ToolProtocolErrorJob = "protocol_error_job"
	ToolConfirmDelete    = "confirm_delete"
	ToolMultiInput       = "multi_input"
	ToolWithTask         = "test_tool_with_task"
)

// asker obtains answers to input requests, keyed by the requests' keys.
type asker func(ctx context.Context, reqs []inputRequest, msg string) (map[string]json.RawMessage, error)

// errNeedInput stops a synchronous 2026-07-28 call that needs input: the
// receiver answers resultType input_required (multi-round-trip).
type errNeedInput struct{ reqs []inputRequest }

func (e *errNeedInput) Error() string { return "input required" }

// toolCall is one decoded tools/call.
type toolCall struct {
	tool       *toolDef
	args       obj
	meta       obj
	key        string                     // idempotency key ("" = none)
	preAnswers map[string]json.RawMessage // answers gathered before the task (MRTR)
	// clientCaps are the capabilities the client declared (initialize, or the
	// request's _meta). Input the client did not declare it can take is a
	// failure, never a request to the client.
	clientCaps obj
	// stateOK is set when the call echoed a requestState this server issued.
	stateOK bool
	// notify sends a notification on the call's response stream (nil when
	// the call has none: tasks, or a client that takes no event stream).
	notify func(method string, params obj)
}

// streamNotifier returns a notify function writing to the stream that
// stream() opens, or nil.
func streamNotifier(stream func() outbound) func(string, obj) {
	if stream == nil {
		return nil
	}
	return func(method string, params obj) {
		if out := stream(); out != nil {
			_ = out.send(notification(method, params))
		}
	}
}

// inputCapability names the client capability an input request needs.
func inputCapability(method string) string {
	switch method {
	case "elicitation/create":
		return "elicitation"
	case "sampling/createMessage":
		return "sampling"
	case "roots/list":
		return "roots"
	}
	return method
}

// missingCapabilities lists the capabilities reqs need that caps lacks.
func missingCapabilities(caps obj, reqs []inputRequest) []string {
	var out []string
	seen := map[string]bool{}
	for _, q := range reqs {
		c := inputCapability(q.Method)
		if _, has := caps[c]; !has && !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// errMissingCapability stops a tool that needs input the client cannot take.
type errMissingCapability struct{ caps []string }

func (e *errMissingCapability) Error() string {
	return "the client declared no " + strings.Join(e.caps, ", ") + " capability"
}

// missingCapabilityError is the call error for input a client cannot take:
// -32021 with the capabilities required, in both eras.
func missingCapabilityError(caps []string) *rpcError {
	req := obj{}
	for _, c := range caps {
		req[c] = obj{}
	}
	return &rpcError{Code: CodeMissingCapability, Message: "Missing required client capability: " + strings.Join(caps, ", "),
		Data: obj{"requiredCapabilities": req}}
}

type toolDef struct {
	name        string
	description string
	support     string
	schema      obj
	annotations obj
	run         func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError)
	// beforeTask, in 2026-07-28, is gathered by MRTR before the task is created.
	beforeTask func(args obj) []inputRequest
}

func textResult(text string, isError bool) obj {
	o := obj{"content": []any{obj{"type": "text", "text": text}}}
	if isError {
		o["isError"] = true
	}
	return o
}

func formElicit(key, message string, props obj, required ...string) inputRequest {
	schema := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		schema["required"] = required
	}
	return inputRequest{Key: key, Method: "elicitation/create", Params: obj{"mode": "form", "message": message, "requestedSchema": schema}}
}

func urlElicit(key, message string) inputRequest {
	id := newID("el_")
	return inputRequest{Key: key, Method: "elicitation/create", Params: obj{
		"mode": "url", "message": message, "elicitationId": id,
		"url": "https://approve.example.invalid/approve/" + id,
	}}
}

// elicitAnswer is the part of an ElicitResult the tools read.
type elicitAnswer struct {
	Action  string `json:"action"`
	Content obj    `json:"content"`
}

func decodeAnswer(raw json.RawMessage) elicitAnswer {
	var a elicitAnswer
	_ = json.Unmarshal(raw, &a)
	return a
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func cancelledErr(ctx context.Context) *rpcError {
	return errf(CodeInternalError, "Work stopped: %v", context.Cause(ctx))
}

// askErr turns an asker failure into a call error.
func askErr(ctx context.Context, err error) *rpcError {
	var need *errNeedInput
	if errors.As(err, &need) {
		return &rpcError{Code: codeNeedInput, Data: need}
	}
	var missing *errMissingCapability
	if errors.As(err, &missing) {
		return missingCapabilityError(missing.caps)
	}
	return cancelledErr(ctx)
}

// codeNeedInput marks an rpcError that carries an MRTR input request.
const codeNeedInput = 1

func scriptedSchema() obj {
	return obj{"type": "object", "properties": obj{
		"duration_ms":     obj{"type": "integer", "minimum": 0, "description": "Milliseconds of work before the outcome (default 0)."},
		"outcome":         obj{"type": "string", "enum": []string{OutcomeComplete, OutcomeToolError, OutcomeRPCError, OutcomeInput, OutcomeHang}, "description": "How the call ends (default complete)."},
		"input_mode":      obj{"type": "string", "enum": []string{"form", "url"}, "description": "Elicitation mode for outcome input (default form)."},
		"input_message":   obj{"type": "string", "description": "Message of the elicitation."},
		"input_schema":    obj{"type": "object", "description": "requestedSchema of a form elicitation for outcome input; the result then quotes the answer (default: a required boolean approve)."},
		"text":            obj{"type": "string", "description": "Text of the result."},
		"error_code":      obj{"type": "integer", "description": "JSON-RPC code for outcome rpc_error (default -32603)."},
		"idempotency_key": obj{"type": "string", "description": "Applies the effect once per key in the system of record (default: the operation id in _meta)."},
		"effect":          obj{"type": "string", "description": "Description of the effect (default: the tool name)."},
		"effect_at":       obj{"type": "string", "enum": []string{"start", "end"}, "description": "Apply the effect before the work (start) or on success (end, default)."},
	}}
}

func (r *Receiver) toolDefs() []*toolDef {
	scripted := func(name, support, desc string) *toolDef {
		return &toolDef{name: name, support: support, description: desc, schema: scriptedSchema(),
			annotations: obj{"destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
			run:         runScripted}
	}
	str := func(d string) obj { return obj{"type": "string", "description": d} }
	defs := []*toolDef{
		scripted(ToolWorkForbidden, SupportForbidden, "Scripted work that never runs as a task."),
		scripted(ToolWorkOptional, SupportOptional, "Scripted work that may run as a task."),
		scripted(ToolWorkRequired, SupportRequired, "Scripted work that only runs as a task."),
		{name: ToolGreet, support: SupportForbidden, description: "Returns Hello, {name}!",
			schema: obj{"type": "object", "properties": obj{"name": str("Who to greet.")}},
			run: func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				name := str2(c.args, "name", "World")
				return textResult("Hello, "+name+"!", false), nil
			}},
		{name: ToolSlowCompute, support: SupportOptional, description: "Sleeps `seconds` seconds, then returns a result.",
			schema: obj{"type": "object", "properties": obj{"seconds": obj{"type": "number", "minimum": 0}, "label": str("Label echoed in the result.")}},
			run: func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				secs, _ := num(c.args, "seconds")
				if err := sleep(ctx, time.Duration(secs*float64(time.Second))); err != nil {
					return nil, cancelledErr(ctx)
				}
				if rerr := r.applyEffect(c); rerr != nil {
					return nil, rerr
				}
				return textResult(fmt.Sprintf("Computed %s after %gs", str2(c.args, "label", "result"), secs), false), nil
			}},
		{name: ToolFailingJob, support: SupportRequired, description: "Returns a tool execution error after about a second.",
			schema: obj{"type": "object", "properties": obj{"delay_ms": obj{"type": "integer", "minimum": 0}}},
			run: func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				d := 1000.0
				if v, ok := num(c.args, "delay_ms"); ok {
					d = v
				}
				if err := sleep(ctx, time.Duration(d)*time.Millisecond); err != nil {
					return nil, cancelledErr(ctx)
				}
				return textResult("Job failed: the tool reported an error", true), nil
			}},
		{name: ToolProtocolErrorJob, support: SupportOptional, description: "Fails with a JSON-RPC protocol error.",
			schema: obj{"type": "object", "properties": obj{}},
			run: func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				if err := sleep(ctx, 100*time.Millisecond); err != nil {
					return nil, cancelledErr(ctx)
				}
				return nil, &rpcError{Code: CodeInternalError, Message: "Internal error: the job crashed", Data: obj{"reason": "protocol_error_job always crashes"}}
			}},
		{name: ToolConfirmDelete, support: SupportOptional, description: "Asks for confirmation by elicitation, then deletes (or keeps) the file.",
			schema: obj{"type": "object", "properties": obj{"filename": str("File to delete."), "idempotency_key": str("Idempotency key of the deletion.")}},
			run: func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				file := str2(c.args, "filename", "file.txt")
				ans, err := ask(ctx, []inputRequest{formElicit("confirm", "Delete "+file+"?", obj{"confirm": obj{"type": "boolean", "title": "Delete the file"}}, "confirm")}, "Waiting for confirmation")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				a := decodeAnswer(ans["confirm"])
				if a.Action != "accept" || a.Content["confirm"] != true {
					return textResult("Kept "+file, false), nil
				}
				if rerr := r.applyEffect(c); rerr != nil {
					return nil, rerr
				}
				return textResult("Deleted "+file, false), nil
			}},
		{name: ToolMultiInput, support: SupportOptional, description: "Asks two questions at once, then completes.",
			schema: obj{"type": "object", "properties": obj{}},
			run: func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				props := obj{"name": obj{"type": "string"}, "confirm": obj{"type": "boolean"}}
				ans, err := ask(ctx, []inputRequest{formElicit("first", "First question", props), formElicit("second", "Second question", props)}, "Waiting for two answers")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				return textResult(fmt.Sprintf("Received %d answers (%s, %s)", len(ans), decodeAnswer(ans["first"]).Action, decodeAnswer(ans["second"]).Action), false), nil
			}},
		{name: ToolWithTask, support: SupportRequired, description: "Asks for user_name (by MRTR before the task in 2026-07-28), then greets as a task.",
			schema:     obj{"type": "object", "properties": obj{}},
			beforeTask: func(obj) []inputRequest { return []inputRequest{userNameRequest()} },
			run: func(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
				ans, err := ask(ctx, []inputRequest{userNameRequest()}, "Waiting for user_name")
				if err != nil {
					return nil, askErr(ctx, err)
				}
				name, _ := decodeAnswer(ans["user_name"]).Content["name"].(string)
				if err := sleep(ctx, 200*time.Millisecond); err != nil {
					return nil, cancelledErr(ctx)
				}
				return textResult("Hello, "+name+"! The task is done.", false), nil
			}},
	}
	if r.cfg.Profile == ProfileConformance {
		defs = append(defs, conformanceTools()...)
	}
	return defs
}

func userNameRequest() inputRequest {
	return formElicit("user_name", "What is your name?", obj{"name": obj{"type": "string", "title": "Name"}}, "name")
}

func str2(m obj, k, def string) string {
	if s, ok := m[k].(string); ok && s != "" {
		return s
	}
	return def
}

// runScripted runs a work_* tool as its arguments say.
func runScripted(ctx context.Context, r *Receiver, c *toolCall, ask asker) (obj, *rpcError) {
	effectAt := str2(c.args, "effect_at", "end")
	if effectAt == "start" {
		if rerr := r.applyEffect(c); rerr != nil {
			return nil, rerr
		}
	}
	d, _ := num(c.args, "duration_ms")
	if err := sleep(ctx, time.Duration(d)*time.Millisecond); err != nil {
		return nil, cancelledErr(ctx)
	}
	text := str2(c.args, "text", c.tool.name+" done")
	switch outcome := str2(c.args, "outcome", OutcomeComplete); outcome {
	case OutcomeComplete:
	case OutcomeToolError:
		return textResult(str2(c.args, "text", c.tool.name+" failed"), true), nil
	case OutcomeRPCError:
		code := CodeInternalError
		if v, ok := num(c.args, "error_code"); ok {
			code = int(v)
		}
		return nil, &rpcError{Code: code, Message: str2(c.args, "text", c.tool.name+" failed with a protocol error")}
	case OutcomeInput:
		msg := str2(c.args, "input_message", "Approve "+c.tool.name+"?")
		req := formElicit("approval", msg, obj{"approve": obj{"type": "boolean", "title": "Approve"}}, "approve")
		schema, custom := c.args["input_schema"].(obj)
		if custom {
			req.Params["requestedSchema"] = schema
		}
		if str2(c.args, "input_mode", "form") == "url" {
			req = urlElicit("approval", msg)
		}
		ans, err := ask(ctx, []inputRequest{req}, "Waiting for approval")
		if err != nil {
			return nil, askErr(ctx, err)
		}
		a := decodeAnswer(ans["approval"])
		if custom {
			return textResult("Answered: "+elicitSummary(ans["approval"]), false), nil
		}
		if a.Action != "accept" || (req.Params["mode"] == "form" && a.Content["approve"] != true) {
			return textResult("Not approved: "+a.Action, true), nil
		}
		text = str2(c.args, "text", c.tool.name+" approved and done")
	case OutcomeHang:
		<-ctx.Done()
		return nil, cancelledErr(ctx)
	default:
		return nil, errf(CodeInvalidParams, "Invalid params: unknown outcome %q", outcome)
	}
	if effectAt != "start" {
		if rerr := r.applyEffect(c); rerr != nil {
			return nil, rerr
		}
	}
	res := textResult(text, false)
	if c.key != "" {
		rec, _ := r.records.Get(c.key)
		res["structuredContent"] = obj{"idempotencyKey": c.key, "receiptId": rec.ReceiptID}
	}
	return res, nil
}

// applyEffect applies the call's effect once per idempotency key.
func (r *Receiver) applyEffect(c *toolCall) *rpcError {
	if c.key == "" {
		return nil
	}
	r.records.Apply(c.key, str2(c.args, "effect", c.tool.name))
	return nil
}

// execute runs a tool once (an execution), counting it.
func (r *Receiver) execute(ctx context.Context, c *toolCall, ask asker) (obj, *rpcError) {
	r.stats.add(func(s *Counters) { s.Executions[c.tool.name]++ })
	wrapped := func(ctx context.Context, reqs []inputRequest, msg string) (map[string]json.RawMessage, error) {
		if len(c.preAnswers) > 0 {
			out := map[string]json.RawMessage{}
			for _, q := range reqs {
				if a, ok := c.preAnswers[q.Key]; ok {
					out[q.Key] = a
				}
			}
			if len(out) == len(reqs) {
				return out, nil
			}
		}
		if m := missingCapabilities(c.clientCaps, reqs); len(m) > 0 {
			return nil, &errMissingCapability{caps: m}
		}
		return ask(ctx, reqs, msg)
	}
	return c.tool.run(ctx, r, c, wrapped)
}

// lookupTool finds a tool by name.
func (r *Receiver) lookupTool(name string) *toolDef {
	for _, t := range r.toolDefs() {
		if t.name == name {
			return t
		}
	}
	return nil
}

// decodeCall reads name, arguments and _meta of a tools/call and counts it.
func (r *Receiver) decodeCall(p obj) (*toolCall, *rpcError) {
	name, ok := p["name"].(string)
	if !ok || name == "" {
		return nil, errf(CodeInvalidParams, "Invalid params: name is required")
	}
	args := obj{}
	if a, present := p["arguments"]; present && a != nil {
		m, ok := a.(obj)
		if !ok {
			return nil, errf(CodeInvalidParams, "Invalid params: arguments must be an object")
		}
		args = m
	}
	meta := sub(p, "_meta")
	key := str(args, "idempotency_key")
	if key == "" {
		key = str(meta, MetaOperationID)
	}
	if key == "" {
		key = str(meta, "operationId")
	}
	r.stats.add(func(s *Counters) {
		s.ToolCalls[name]++
		if key != "" {
			s.ToolCallsByKey[key]++
		}
	})
	t := r.lookupTool(name)
	if t == nil {
		return nil, errf(CodeInvalidParams, "Unknown tool: %s", name)
	}
	if key != "" {
		r.records.touch(key, str2(args, "effect", name))
	}
	return &toolCall{tool: t, args: args, meta: meta, key: key}, nil
}

// toolsList encodes tools/list. legacy adds execution.taskSupport.
func (r *Receiver) toolsList(legacy bool) []any {
	var out []any
	for _, t := range r.toolDefs() {
		o := obj{"name": t.name, "description": t.description, "inputSchema": t.schema}
		if t.annotations != nil {
			o["annotations"] = t.annotations
		}
		if legacy && (t.support != SupportForbidden || t.name == ToolWorkForbidden) {
			o["execution"] = obj{"taskSupport": t.support}
		}
		out = append(out, o)
	}
	return out
}
