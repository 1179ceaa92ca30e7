package receiver

import (
	"context"
	"encoding/json"
	"time"
)

// reqCtx is what a dispatcher knows about the request beyond its message.
type reqCtx struct {
	ctx   context.Context
	ident Identity
	sess  *session
	// stream returns the stream this request's response goes on, switching
	// a POST to SSE if needed; nil when the client cannot take a stream.
	stream func() outbound
	// modern is set for 2026-07-28 requests.
	modern *modernReq
}

// reply is a dispatcher's answer plus transport instructions.
type reply struct {
	result     any
	err        *rpcError
	dropBefore bool // drop the connection without writing the answer
	dropAfter  bool // write the answer, then drop the connection
	delay      time.Duration
	httpStatus int // a bare HTTP status instead of a JSON-RPC answer (refused tasks/get)
	retryAfter time.Duration
}

func ok(result any) reply       { return reply{result: result} }
func fail(err *rpcError) reply  { return reply{err: err} }
func relatedMeta(id string) obj { return obj{MetaRelatedTask: obj{"taskId": id}} }

func (r *Receiver) legacyCapabilities() obj {
	tasks := obj{"cancel": obj{}, "requests": obj{"tools": obj{"call": obj{}}}}
	if r.authenticated() {
		tasks["list"] = obj{}
	}
	return obj{"tools": obj{}, "tasks": tasks}
}

func (r *Receiver) initializeResult() obj {
	return obj{
		"protocolVersion": VersionLegacy,
		"capabilities":    r.legacyCapabilities(),
		"serverInfo":      obj{"name": r.cfg.ServerName, "version": r.cfg.ServerVersion},
		"instructions":    "Taskgate reference MCP Task receiver.",
	}
}

// legacyDispatch answers one 2025-11-25 request on an initialized session.
func (r *Receiver) legacyDispatch(rc *reqCtx, m *message) reply {
	p, perr := decodeParams(m.Params)
	if perr != nil {
		return fail(perr)
	}
	switch m.Method {
	case "ping":
		return ok(obj{})
	case "tools/list":
		return ok(obj{"tools": r.toolsList(true)})
	case "tools/call":
		return r.legacyToolsCall(rc, p)
	case "tasks/get":
		return r.legacyTasksGet(rc, p)
	case "tasks/result":
		return r.legacyTasksResult(rc, p)
	case "tasks/list":
		return r.legacyTasksList(rc, p)
	case "tasks/cancel":
		return r.legacyTasksCancel(rc, p)
	case "initialize":
		return fail(errf(CodeInvalidRequest, "Invalid Request: session already initialized"))
	}
	return fail(errf(CodeMethodNotFound, "Method not found: %s", m.Method))
}

func (r *Receiver) legacyToolsCall(rc *reqCtx, p obj) reply {
	call, rerr := r.decodeCall(p)
	if rerr != nil {
		return fail(rerr)
	}
	call.clientCaps = rc.sess.capabilities()
	f := r.knobs.fault(call.tool.name)
	taskMeta, augmented := p["task"].(obj)
	if _, present := p["task"]; present && !augmented && p["task"] != nil {
		return fail(errf(CodeInvalidParams, "Invalid params: task must be an object"))
	}
	if augmented {
		if call.tool.support == SupportForbidden {
			return fail(errf(CodeMethodNotFound, "Tool %s does not support task augmentation", call.tool.name))
		}
		ttl := r.cfg.DefaultTTL
		if v, ok := num(taskMeta, "ttl"); ok && v > 0 {
			ttl = min(time.Duration(v)*time.Millisecond, r.cfg.MaxTTL)
		}
		t, rerr := r.startTask(rc.ident, eraLegacy, rc.sess.id, ttl, call)
		if rerr != nil {
			return fail(rerr)
		}
		if f.Duplicate {
			_, _ = r.startTask(rc.ident, eraLegacy, rc.sess.id, ttl, call)
		}
		res := obj{"task": t.legacyTask(), "_meta": obj{"io.modelcontextprotocol/model-immediate-response": call.tool.name + " started as task " + t.ID}}
		return reply{result: res, dropBefore: f.DropBeforeCreateResult, dropAfter: f.DropAfterCreateResult, delay: f.Delay}
	}
	if call.tool.support == SupportRequired {
		return fail(errf(CodeMethodNotFound, "Tool %s requires task augmentation", call.tool.name))
	}
	if f.Duplicate {
		dup := *call
		r.goBackground(func() { _, _ = r.execute(r.ctx, &dup, r.plainAsker(rc)) })
	}
	ctx, cancel := context.WithCancel(rc.ctx)
	defer cancel()
	stop := context.AfterFunc(r.ctx, cancel)
	defer stop()
	call.notify = streamNotifier(rc.stream)
	res, rerr := r.execute(ctx, call, r.plainAsker(rc))
	return reply{result: res, err: rerr, delay: f.Delay}
}

// plainAsker asks for input on a plain (not task) 2025-11-25 call: an
// elicitation/create request on the response stream, awaited in place.
func (r *Receiver) plainAsker(rc *reqCtx) asker {
	return func(ctx context.Context, reqs []inputRequest, msg string) (map[string]json.RawMessage, error) {
		var out outbound
		if rc.stream != nil {
			out = rc.stream()
		}
		if out == nil {
			out = rc.sess.getStream()
		}
		if out == nil {
			return nil, errf(CodeInternalError, "input needed but the client accepts no event stream")
		}
		answers := make(map[string]json.RawMessage, len(reqs))
		for _, q := range reqs {
			got := make(chan json.RawMessage, 1)
			if _, err := rc.sess.sendRequest(out, q.Method, q.Params, func(m *message) {
				if m.Error != nil {
					got <- json.RawMessage(`{"action":"cancel"}`)
					return
				}
				got <- m.Result
			}); err != nil {
				return nil, err
			}
			select {
			case a := <-got:
				answers[q.Key] = a
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return answers, nil
	}
}

// startTask creates a task for call and runs the tool in the background.
// It returns the task as created (working), whatever the tool does next.
func (r *Receiver) startTask(ident Identity, e era, sessionID string, ttl time.Duration, call *toolCall) (taskSnapshot, *rpcError) {
	ctx, cancel := context.WithCancel(r.ctx)
	t, rerr := r.tasks.create(ident, e, call.tool.name, sessionID, ttl, cancel)
	if rerr != nil {
		cancel()
		return taskSnapshot{}, rerr
	}
	created := r.tasks.snapshot(t)
	r.log.Info("task created", "task", t.id, "tenant", ident.Tenant, "actor", ident.Actor, "tool", call.tool.name, "era", e)
	r.goBackground(func() {
		defer cancel()
		res, rerr := r.execute(ctx, call, func(ctx context.Context, reqs []inputRequest, msg string) (map[string]json.RawMessage, error) {
			return r.tasks.awaitInput(ctx, t, reqs, msg)
		})
		if ctx.Err() != nil {
			return
		}
		r.tasks.finish(t, res, rerr)
	})
	return created, nil
}

func (r *Receiver) taskParam(rc *reqCtx, p obj) (*task, string, *rpcError) {
	id, ok := p["taskId"].(string)
	if !ok || id == "" {
		return nil, "", errf(CodeInvalidParams, "Invalid params: taskId is required")
	}
	e := eraLegacy
	if rc.modern != nil {
		e = eraExtension
	}
	t := r.tasks.lookup(rc.ident, e, id)
	if t == nil {
		r.log.Warn("task lookup failed", "tenant", rc.ident.Tenant, "actor", rc.ident.Actor)
		return nil, id, taskNotFound(id)
	}
	return t, id, nil
}

func (r *Receiver) refusedGet() (reply, bool) {
	refuse, status, after := r.knobs.refuseGet(r.cfg.Now())
	if !refuse {
		return reply{}, false
	}
	r.stats.add(func(c *Counters) { c.RefusedGets++ })
	if status != 0 {
		return reply{httpStatus: status, retryAfter: after}, true
	}
	return fail(errf(CodeInternalError, "Internal error: tasks/get temporarily unavailable")), true
}

func (r *Receiver) legacyTasksGet(rc *reqCtx, p obj) reply {
	if rep, refused := r.refusedGet(); refused {
		return rep
	}
	t, _, rerr := r.taskParam(rc, p)
	if rerr != nil {
		return fail(rerr)
	}
	return ok(r.tasks.snapshot(t).legacyTask())
}

// legacyTasksResult holds the response until the task is terminal, sending
// the task's elicitation requests on the response stream meanwhile.
func (r *Receiver) legacyTasksResult(rc *reqCtx, p obj) reply {
	t, _, rerr := r.taskParam(rc, p)
	if rerr != nil {
		return fail(rerr)
	}
	var own *sseStream // this request's stream, once a question went out on it
	onChange := func() {
		if r.tasks.snapshot(t).Status != StatusInputRequired {
			return
		}
		inputOnGet, _, _ := r.knobs.flags()
		var out outbound
		if !inputOnGet && rc.stream != nil {
			out = rc.stream()
			own, _ = out.(*sseStream)
		}
		if out == nil {
			out = rc.sess.getStream()
		}
		if out != nil {
			r.deliverLegacyInputs(t.id, rc.sess, out)
		}
	}
	if err := r.tasks.wait(rc.ctx, t, onChange); err != nil {
		// The client went away. A question sent on this stream is asked again on another
		// tasks/result of the task held open now (a console replica that took over) at once,
		// not at the task's next change: the stream is closed first, so it no longer counts as
		// the one holding the question.
		if own != nil {
			own.close()
			r.tasks.wake(t)
		}
		return fail(errf(CodeInternalError, "Internal error: %v", err))
	}
	ts := r.tasks.snapshot(t)
	switch {
	case ts.Status == StatusCancelled:
		// What server-everything (TS SDK 1.x) answers; the spec defines no result.
		return fail(&rpcError{Code: CodeInternalError, Message: "Task " + ts.ID + " was cancelled", Data: obj{"_meta": relatedMeta(ts.ID)}})
	case ts.Err != nil:
		e := *ts.Err
		data := obj{}
		if d, ok := e.Data.(obj); ok {
			for k, v := range d {
				data[k] = v
			}
		} else if e.Data != nil {
			data["data"] = e.Data
		}
		data["_meta"] = relatedMeta(ts.ID)
		e.Data = data
		return fail(&e)
	}
	res := obj{}
	for k, v := range ts.Result {
		res[k] = v
	}
	res["_meta"] = relatedMeta(ts.ID)
	return ok(res)
}

// listPageSize is the tasks/list page size.
const listPageSize = 20

func (r *Receiver) legacyTasksList(rc *reqCtx, p obj) reply {
	if !r.authenticated() {
		return fail(errf(CodeMethodNotFound, "Method not found: tasks/list"))
	}
	var after uint64
	if c, present := p["cursor"]; present && c != nil {
		cs, _ := c.(string)
		var ok bool
		if after, ok = r.decodeCursor(cs, rc.ident); !ok {
			return fail(errf(CodeInvalidParams, "Invalid params: bad cursor"))
		}
	}
	page, more := r.tasks.listPage(rc.ident, after, listPageSize)
	tasks := make([]any, 0, len(page))
	for _, ts := range page {
		tasks = append(tasks, ts.legacyTask())
	}
	res := obj{"tasks": tasks}
	if more && len(page) > 0 {
		res["nextCursor"] = r.encodeCursor(page[len(page)-1].Seq, rc.ident)
	}
	return ok(res)
}

func (r *Receiver) legacyTasksCancel(rc *reqCtx, p obj) reply {
	t, id, rerr := r.taskParam(rc, p)
	if rerr != nil {
		return fail(rerr)
	}
	if prev := r.tasks.cancel(t, "Cancelled by requestor"); prev.Terminal() {
		return fail(errf(CodeInvalidParams, "Task %s is already %s", id, prev))
	}
	return ok(r.tasks.snapshot(t).legacyTask())
}
