package receiver

import (
	"context"
	"encoding/json"
	"sort"
)

// modernReq is what a 2026-07-28 request declares in its _meta.
type modernReq struct {
	version      string
	caps         obj
	declaresTask bool
}

// readModernMeta extracts the per-request protocol version and client
// capabilities from params._meta.
func readModernMeta(p obj) *modernReq {
	meta := sub(p, "_meta")
	caps := sub(meta, MetaClientCapabilities)
	_, declares := sub(caps, "extensions")[ExtensionTasks]
	return &modernReq{version: str(meta, MetaProtocolVersion), caps: caps, declaresTask: declares}
}

func (r *Receiver) supportedVersions() []string {
	if r.cfg.Eras == ErasExtension {
		return []string{VersionExtension}
	}
	return []string{VersionExtension, VersionLegacy}
}

func (r *Receiver) versionError(requested string) *rpcError {
	return &rpcError{Code: CodeUnsupportedVersion, Message: "Unsupported protocol version",
		Data: obj{"supported": r.supportedVersions(), "requested": requested}}
}

func missingTasksCapability(method string) *rpcError {
	return &rpcError{Code: CodeMissingCapability, Message: "Missing required client capability: " + ExtensionTasks + " (" + method + ")",
		Data: obj{"requiredCapabilities": obj{"extensions": obj{ExtensionTasks: obj{}}}}}
}

func complete(o obj) obj {
	o["resultType"] = "complete"
	return o
}

func (r *Receiver) discoverResult() obj {
	return obj{
		"resultType":        "complete",
		"supportedVersions": r.supportedVersions(),
		"capabilities":      obj{"tools": obj{}, "extensions": obj{ExtensionTasks: obj{}}},
		"cacheScope":        "private",
		"ttlMs":             0,
		"instructions":      "Taskgate reference MCP Task receiver.",
		"_meta":             obj{"io.modelcontextprotocol/serverInfo": obj{"name": r.cfg.ServerName, "version": r.cfg.ServerVersion}},
	}
}

// modernDispatch answers one 2026-07-28 request.
func (r *Receiver) modernDispatch(rc *reqCtx, m *message) reply {
	p, perr := decodeParams(m.Params)
	if perr != nil {
		return fail(perr)
	}
	switch m.Method {
	case "server/discover":
		return ok(r.discoverResult())
	case "tools/list":
		return ok(complete(obj{"tools": r.toolsList(false), "cacheScope": "private", "ttlMs": 0}))
	case "tools/call":
		return r.modernToolsCall(rc, p)
	case "tasks/get", "tasks/update", "tasks/cancel":
		if !rc.modern.declaresTask {
			return fail(missingTasksCapability(m.Method))
		}
		switch m.Method {
		case "tasks/get":
			return r.modernTasksGet(rc, p)
		case "tasks/update":
			return r.modernTasksUpdate(rc, p)
		default:
			return r.modernTasksCancel(rc, p)
		}
	case "subscriptions/listen":
		return r.modernListen(rc, p)
	}
	return fail(errf(CodeMethodNotFound, "Method not found: %s", m.Method))
}

// decodeInputResponses validates MRTR inputResponses and requestState.
func (r *Receiver) decodeInputResponses(rc *reqCtx, p obj, tool string) (map[string]json.RawMessage, *rpcError) {
	raw, present := p["inputResponses"]
	out := map[string]json.RawMessage{}
	if present {
		m, isObj := raw.(obj)
		if !isObj {
			return nil, errf(CodeInvalidParams, "Invalid params: inputResponses must be an object")
		}
		for k, v := range m {
			if _, isObj := v.(obj); !isObj {
				return nil, errf(CodeInvalidParams, "Invalid params: inputResponses[%q] must be an object", k)
			}
			b, _ := json.Marshal(v)
			out[k] = b
		}
	}
	if s, present := p["requestState"]; present {
		ss, isStr := s.(string)
		st, valid := r.decodeState(ss, rc.ident)
		if !isStr || !valid || st.Tool != tool {
			return nil, errf(CodeInvalidParams, "Invalid params: requestState is not one this server issued for %s", tool)
		}
		for k, v := range st.Answers {
			if _, newer := out[k]; !newer {
				out[k] = v
			}
		}
	}
	return out, nil
}

func (r *Receiver) inputRequired(rc *reqCtx, tool string, reqs []inputRequest, answered map[string]json.RawMessage) reply {
	if m := missingCapabilities(rc.modern.caps, reqs); len(m) > 0 {
		return fail(missingCapabilityError(m))
	}
	in := obj{}
	keys := make([]string, 0, len(reqs))
	for _, q := range reqs {
		in[q.Key] = obj{"method": q.Method, "params": q.Params}
		keys = append(keys, q.Key)
	}
	sort.Strings(keys)
	return ok(obj{"resultType": "input_required", "inputRequests": in,
		"requestState": r.encodeState(requestState{Tool: tool, Keys: keys, Answers: answered}, rc.ident)})
}

func (r *Receiver) modernToolsCall(rc *reqCtx, p obj) reply {
	call, rerr := r.decodeCall(p)
	if rerr != nil {
		return fail(rerr)
	}
	answers, rerr := r.decodeInputResponses(rc, p, call.tool.name)
	if rerr != nil {
		return fail(rerr)
	}
	call.preAnswers = answers
	call.clientCaps = rc.modern.caps
	_, call.stateOK = p["requestState"]
	f := r.knobs.fault(call.tool.name)
	if call.tool.support == SupportRequired && !rc.modern.declaresTask {
		return fail(missingTasksCapability("tools/call " + call.tool.name))
	}
	if call.tool.support != SupportForbidden && rc.modern.declaresTask {
		if call.tool.beforeTask != nil {
			var missing []inputRequest
			for _, q := range call.tool.beforeTask(call.args) {
				if _, has := answers[q.Key]; !has {
					missing = append(missing, q)
				}
			}
			if len(missing) > 0 {
				return r.inputRequired(rc, call.tool.name, missing, answers)
			}
		}
		t, rerr := r.startTask(rc.ident, eraExtension, "", r.cfg.DefaultTTL, call)
		if rerr != nil {
			return fail(rerr)
		}
		if f.Duplicate {
			_, _ = r.startTask(rc.ident, eraExtension, "", r.cfg.DefaultTTL, call)
		}
		res := t.extensionTask()
		res["resultType"] = "task"
		return reply{result: res, dropBefore: f.DropBeforeCreateResult, dropAfter: f.DropAfterCreateResult, delay: f.Delay}
	}
	if f.Duplicate {
		dup := *call
		r.goBackground(func() { _, _ = r.execute(r.ctx, &dup, mrtrAsker) })
	}
	ctx, cancel := context.WithCancel(rc.ctx)
	defer cancel()
	stop := context.AfterFunc(r.ctx, cancel)
	defer stop()
	call.notify = streamNotifier(rc.stream)
	res, rerr := r.execute(ctx, call, mrtrAsker)
	if rerr != nil && rerr.Code == codeNeedInput {
		need, _ := rerr.Data.(*errNeedInput)
		return r.inputRequired(rc, call.tool.name, need.reqs, answers)
	}
	if rerr != nil {
		return reply{err: rerr, delay: f.Delay}
	}
	return reply{result: complete(res), delay: f.Delay}
}

// mrtrAsker stops a synchronous 2026-07-28 call that lacks answers: the
// client retries with inputResponses (execute supplies answers it has).
func mrtrAsker(ctx context.Context, reqs []inputRequest, msg string) (map[string]json.RawMessage, error) {
	return nil, &errNeedInput{reqs: reqs}
}

func (r *Receiver) modernTasksGet(rc *reqCtx, p obj) reply {
	if rep, refused := r.refusedGet(); refused {
		return rep
	}
	t, _, rerr := r.taskParam(rc, p)
	if rerr != nil {
		return fail(rerr)
	}
	return ok(complete(r.tasks.snapshot(t).detailedTask()))
}

func (r *Receiver) modernTasksUpdate(rc *reqCtx, p obj) reply {
	t, _, rerr := r.taskParam(rc, p)
	if rerr != nil {
		return fail(rerr)
	}
	raw, isObj := p["inputResponses"].(obj)
	if !isObj {
		return fail(errf(CodeInvalidParams, "Invalid params: inputResponses must be an object"))
	}
	answers := map[string]json.RawMessage{}
	for k, v := range raw {
		b, _ := json.Marshal(v)
		answers[k] = b
	}
	r.tasks.answer(t, answers)
	return ok(complete(obj{}))
}

func (r *Receiver) modernTasksCancel(rc *reqCtx, p obj) reply {
	t, _, rerr := r.taskParam(rc, p)
	if rerr != nil {
		return fail(rerr)
	}
	r.tasks.cancel(t, "Cancelled by requestor")
	return ok(complete(obj{}))
}

// modernListen serves subscriptions/listen: it acknowledges the task ids the
// caller may see, then streams notifications/tasks until the client leaves.
func (r *Receiver) modernListen(rc *reqCtx, p obj) reply {
	if rc.stream == nil {
		return fail(errf(CodeInvalidRequest, "Invalid Request: subscriptions/listen needs an event stream"))
	}
	var ids []string
	if l, isList := sub(p, "notifications")["taskIds"].([]any); isList {
		for _, v := range l {
			if s, isStr := v.(string); isStr && r.tasks.lookup(rc.ident, eraExtension, s) != nil {
				ids = append(ids, s)
			}
		}
	}
	out := rc.stream()
	if out == nil {
		return fail(errf(CodeInvalidRequest, "Invalid Request: subscriptions/listen needs an event stream"))
	}
	s := &subscription{id: newID("sub_"), tenant: rc.ident.Tenant, taskIDs: map[string]bool{}, out: out}
	for _, id := range ids {
		s.taskIDs[id] = true
	}
	r.subMu.Lock()
	r.subs[s.id] = s
	r.subMu.Unlock()
	defer func() {
		r.subMu.Lock()
		delete(r.subs, s.id)
		r.subMu.Unlock()
	}()
	accepted := make([]any, 0, len(ids))
	for _, id := range ids {
		accepted = append(accepted, id)
	}
	_ = out.send(notification("notifications/subscriptions/acknowledged", obj{
		"notifications": obj{"taskIds": accepted}, "_meta": obj{MetaSubscriptionID: s.id}}))
	// Send the current state of each task at once, so no change is missed.
	for _, id := range ids {
		if t := r.tasks.lookup(rc.ident, eraExtension, id); t != nil {
			d := r.tasks.snapshot(t).detailedTask()
			d["_meta"] = obj{MetaSubscriptionID: s.id}
			_ = out.send(notification("notifications/tasks", d))
		}
	}
	select {
	case <-rc.ctx.Done():
	case <-out.done():
	case <-r.ctx.Done():
	}
	return ok(complete(obj{}))
}
