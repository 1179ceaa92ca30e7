package receiver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// stdioPeer is a raw JSON-RPC client over a pipe pair.
type stdioPeer struct {
	t     testing.TB
	in    *io.PipeWriter
	mu    sync.Mutex
	waits map[string]chan rpcResp
	notes chan obj
	reqs  chan obj
	done  chan error
}

func startStdio(t testing.TB, r *Receiver) *stdioPeer {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &stdioPeer{t: t, in: inW, waits: map[string]chan rpcResp{}, notes: make(chan obj, 64), reqs: make(chan obj, 16), done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		err := r.ServeStdio(ctx, inR, outW)
		outW.Close()
		p.done <- err
	}()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(outR)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var m obj
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			_, hasMethod := m["method"]
			_, hasID := m["id"]
			switch {
			case hasMethod && hasID:
				p.reqs <- m
			case hasMethod:
				select {
				case p.notes <- m:
				default:
				}
			default:
				var resp rpcResp
				b, _ := json.Marshal(m)
				_ = json.Unmarshal(b, &resp)
				p.mu.Lock()
				ch := p.waits[fmt.Sprint(m["id"])]
				p.mu.Unlock()
				if ch != nil {
					ch <- resp
				}
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
		<-readDone
	})
	return p
}

func (p *stdioPeer) send(m any) {
	b, _ := json.Marshal(m)
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

func (p *stdioPeer) call(method string, params obj) (obj, *rpcError) {
	p.t.Helper()
	id := fmt.Sprint(rpcIDs.Add(1))
	ch := make(chan rpcResp, 1)
	p.mu.Lock()
	p.waits[id] = ch
	p.mu.Unlock()
	p.send(obj{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	select {
	case r := <-ch:
		return r.Result, r.Error
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s: no response", method)
	}
	return nil, nil
}

func TestStdioLegacyTaskWithInput(t *testing.T) {
	t.Parallel()
	r := New(Config{})
	t.Cleanup(r.Close)
	p := startStdio(t, r)
	res, rerr := p.call("initialize", obj{"protocolVersion": VersionLegacy, "capabilities": obj{"elicitation": obj{}}, "clientInfo": obj{"name": "t", "version": "1"}})
	mustOK(t, "initialize", res, rerr)
	if _, has := sub(sub(res, "capabilities"), "tasks")["list"]; has {
		t.Fatal("single-user stdio must not declare tasks.list")
	}
	res, rerr = p.call("tools/call", obj{"name": ToolConfirmDelete, "arguments": obj{"filename": "f.txt"}, "task": obj{"ttl": 60000}})
	mustOK(t, "tools/call", res, rerr)
	id := str(sub(res, "task"), "taskId")
	waitStatus(t, r, id, StatusInputRequired)
	go func() {
		req := <-p.reqs
		if str(sub(sub(sub(req, "params"), "_meta"), MetaRelatedTask), "taskId") != id {
			t.Errorf("elicitation without related-task _meta: %v", req)
		}
		p.send(obj{"jsonrpc": "2.0", "id": req["id"], "result": obj{"action": "accept", "content": obj{"confirm": true}}})
	}()
	res, rerr = p.call("tasks/result", obj{"taskId": id})
	mustOK(t, "tasks/result", res, rerr)
	if res["content"].([]any)[0].(obj)["text"] != "Deleted f.txt" {
		t.Fatalf("result %v", res)
	}
	var statuses []string
	for len(statuses) < 3 {
		n := <-p.notes
		if n["method"] == "notifications/tasks/status" {
			statuses = append(statuses, str(sub(n, "params"), "status"))
		}
	}
	if fmt.Sprint(statuses) != "[input_required working completed]" {
		t.Fatalf("notifications %v", statuses)
	}
	checkHistory(t, r, id, StatusWorking, StatusInputRequired, StatusWorking, StatusCompleted)
}

func TestStdioExtension(t *testing.T) {
	t.Parallel()
	r := New(Config{})
	t.Cleanup(r.Close)
	p := startStdio(t, r)
	meta := obj{MetaProtocolVersion: VersionExtension, MetaClientCapabilities: obj{"extensions": obj{ExtensionTasks: obj{}}}}
	res, rerr := p.call("server/discover", obj{"_meta": meta})
	mustOK(t, "discover", res, rerr)
	res, rerr = p.call("tools/call", obj{"name": ToolSlowCompute, "arguments": obj{"seconds": 0}, "_meta": meta})
	mustOK(t, "tools/call", res, rerr)
	if res["resultType"] != "task" {
		t.Fatalf("%v", res)
	}
	waitStatus(t, r, str(res, "taskId"), StatusCompleted)
	res, rerr = p.call("tasks/get", obj{"taskId": res["taskId"], "_meta": meta})
	mustOK(t, "tasks/get", res, rerr)
	if res["status"] != "completed" || res["result"] == nil {
		t.Fatalf("%v", res)
	}
	_, rerr = p.call("tasks/get", obj{"taskId": "x", "_meta": obj{MetaProtocolVersion: "2099-01-01"}})
	mustErr(t, "version", rerr, CodeUnsupportedVersion)
}

func TestStdioLegacyOnlyAnswersDiscoverWithMethodNotFound(t *testing.T) {
	t.Parallel()
	r := New(Config{Eras: ErasLegacy})
	t.Cleanup(r.Close)
	p := startStdio(t, r)
	_, rerr := p.call("server/discover", obj{"_meta": obj{MetaProtocolVersion: VersionExtension}})
	mustErr(t, "discover", rerr, CodeMethodNotFound)
}

func TestStdioDropEndsConnection(t *testing.T) {
	t.Parallel()
	r := New(Config{})
	t.Cleanup(r.Close)
	p := startStdio(t, r)
	r.Knobs().Set(Fault{DropBeforeCreateResult: true})
	p.call("initialize", obj{"protocolVersion": VersionLegacy})
	p.send(obj{"jsonrpc": "2.0", "id": "x", "method": "tools/call", "params": obj{"name": ToolWorkOptional, "task": obj{}}})
	if err := <-p.done; !errors.Is(err, ErrDropped) {
		t.Fatalf("ServeStdio returned %v", err)
	}
	if len(r.TaskIDs()) != 1 {
		t.Fatal("the task must exist")
	}
}

func TestListenAndServe(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ListenAndServe(ctx, addr, Config{}, nil) }()
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + addr + "/records/none")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNotFound
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ListenAndServe: %v", err)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"a","result":{"action":"accept"}}`,
		`[{"jsonrpc":"2.0"}]`, `{"jsonrpc":"1.0","id":1,"method":"x"}`, `{"jsonrpc":"2.0","id":{},"method":"x"}`, ``, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, rerr := decodeMessage(b)
		if rerr == nil {
			if m == nil || (!m.isRequest() && !m.isNotification() && !m.isResponse()) {
				t.Fatalf("accepted a message of no kind: %q", b)
			}
			if _, perr := decodeParams(m.Params); perr != nil && m.isRequest() {
				t.Fatalf("accepted params that do not decode: %q", b)
			}
		}
	})
}
