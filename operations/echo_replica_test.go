package operations_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/gates/faultproxy"
	"github.com/taskgate/taskgate/internal/opstest"
	"github.com/taskgate/taskgate/mcpclient"
	"github.com/taskgate/taskgate/operations"
)

// echoText is what the server says back once it has the answer: the card grouped, the
// holder's name in capitals with other spacing, the code as typed.
const echoText = "charging card 4111 1111 1111 1111 (4.111111111111111e+15) for JANE  ROE, code hunter22"

// echoAnswer makes the server behind the proxy echo the answer in every status message after
// the question and in the task's structured result, in either era's shape.
func echoAnswer(msg map[string]any) bool {
	fired := false
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["statusMessage"].(string); ok && v["status"] != "input_required" {
				v["statusMessage"] = echoText
				fired = true
			}
			if c, ok := v["content"].([]any); ok {
				v["content"] = append(c, map[string]any{"type": "text", "text": echoText})
				v["structuredContent"] = map[string]any{"card": 4111111111111111, "holder": "Jane Roe", "code": "HUNTER22", "amount": 10}
				fired = true
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(msg["result"])
	walk(msg["params"]) // status notifications too: a status learned from one must be cut the same
	return fired
}

// A person answers through one replica; another replica (its own Store and Service on the
// same database) polls the task and records its result. The values the server echoes are
// cut out of the status message, the timeline, the preview and the kept result on that
// replica too, in both eras; the database holds only keyed hashes of them.
func TestEchoedAnswerIsRedactedOnAnotherReplica(t *testing.T) {
	t.Parallel()
	for _, era := range []string{"legacy", "extension"} {
		t.Run(era, func(t *testing.T) {
			t.Parallel()
			var p *faultproxy.Proxy
			b := opstest.Setup(t, opstest.Options{Era: era, Extra: bigSync, Front: func(t testing.TB, target string) string {
				var err error
				if p, err = faultproxy.New(target); err != nil {
					t.Fatal(err)
				}
				u, err := p.Start()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = p.Close() })
				return u
			}})
			ctx := context.Background()
			// The receiver quotes the answer in its result; the proxy makes the server echo it
			// in its status messages and structured result too.
			id := b.Start(t, "refundkept", "echo-"+era, `{"outcome": "input", "input_message": "Card?", "input_schema": {"type": "object",
				"properties": {"approve": {"type": "boolean"}, "card": {"type": "number"}, "holder": {"type": "string"}, "code": {"type": "string"}}}}`).Response.OperationID
			// The replica that records: its own Store (nothing in memory shared with the
			// answering one). In the extension era it is a whole other replica (its own
			// connections and Service) that takes the task over; in the 2025-11-25 era the
			// question is held on the stream of the connection that read it, so the answer goes
			// through that connection and the watcher writing the result uses the other Store.
			b2 := *b
			b2.Store = operations.NewStore(b.Pool)
			var passes2 <-chan int
			if era == "extension" {
				w1, passes := b.Watcher(t, "r1", nil)
				opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool { return asking(t, b, id) })
				w1.Stop()
				if err := b.Store.ReleaseLeases(ctx, "r1"); err != nil {
					t.Fatal(err)
				}
				b2.Servers = operations.NewServers(operations.ServersConfig{Policy: b.Policy, BuiltinURL: b.BaseURL})
				t.Cleanup(b2.Servers.Close)
				var err error
				if b2.Ops, err = operations.NewService(operations.Config{Store: b2.Store, Policy: b.Policy, Servers: b2.Servers,
					PollFloor: 20 * time.Millisecond, DefaultPoll: 50 * time.Millisecond}); err != nil {
					t.Fatal(err)
				}
				_, passes2 = b2.Watcher(t, "r2", nil)
			} else {
				_, passes2 = b2.Watcher(t, "r2", nil)
				opstest.WaitFor(t, passes2, 10*time.Second, "pending input", func() bool { return asking(t, b, id) })
			}

			p.Add(faultproxy.Rule{Action: faultproxy.Rewrite, Times: -1, Rewrite: echoAnswer})
			in := b.Detail(t, id).Inputs[0]
			if _, err := b.Ops.AnswerInput(ctx, operations.Scope{Tenants: []string{"acme"}}, id, in.Key, "alice",
				mcpclient.InputResponse{Action: mcpclient.ActionAccept, Content: map[string]any{"approve": true,
					"card": float64(4111111111111111), "holder": "Jane Roe", "code": "hunter22"}}); err != nil {
				t.Fatal(err)
			}
			opstest.WaitFor(t, passes2, 15*time.Second, "envelope on the second replica", func() bool { return b2.Detail(t, id).Envelope != nil })
			d := b2.Detail(t, id)
			e := d.Envelope
			var seen strings.Builder
			seen.WriteString(e.Preview + "\n" + e.StatusMessage + "\n" + string(e.Result) + "\n" + d.Task.StatusMessage + "\n")
			for _, te := range d.Timeline {
				seen.WriteString(te.Message + "\n")
			}
			all := strings.ToLower(seen.String())
			t.Logf("kept:\n%s", all)
			for _, v := range []string{"4111", "4.111", "hunter22", "jane", "roe,"} {
				if strings.Contains(all, v) {
					t.Errorf("an echoed answer (%q) was kept", v)
				}
			}
			statusCut := false
			for _, te := range d.Timeline {
				statusCut = statusCut || te.Source != operations.SourceOperator && strings.HasPrefix(te.Message, "charging card [redacted]")
			}
			if !strings.Contains(e.Preview, operations.Redacted) || !statusCut ||
				!strings.Contains(strings.ReplaceAll(string(e.Result), " ", ""), `"amount":10`) {
				t.Errorf("preview %q, a status message cut %v, result %s: the echo was not seen and cut", e.Preview, statusCut, e.Result)
			}
			var n int
			var plain bool
			if err := b.Pool.QueryRow(ctx, `SELECT count(*), coalesce(bool_or(position('hunter22'::bytea in mac) > 0 OR position('4111'::bytea in mac) > 0), false)
				FROM answer_echoes WHERE operation_id = $1`, id).Scan(&n, &plain); err != nil {
				t.Fatal(err)
			}
			if n < 3 || plain {
				t.Errorf("answer hashes: %d rows, a value in clear: %v", n, plain)
			}
		})
	}
}

// asking reports whether the operation's task waits for its one open question.
func asking(t *testing.T, b *opstest.Bundle, id string) bool {
	d := b.Detail(t, id)
	return len(d.Inputs) == 1 && d.Task != nil && d.Task.State == operations.StateInputRequired
}

// A status notification arriving at a replica that never saw the answer has the echo cut
// out before it is stored, as a poll's message has.
func TestEchoInANotificationIsRedacted(t *testing.T) {
	t.Parallel()
	b := opstest.Setup(t, opstest.Options{Era: "legacy", Extra: bigSync})
	ctx := context.Background()
	id := b.Start(t, "refundkept", "echo-note", `{"outcome": "input", "input_message": "Card?"}`).Response.OperationID
	w, passes := b.Watcher(t, "r1", nil)
	opstest.WaitFor(t, passes, 10*time.Second, "pending input", func() bool { return asking(t, b, id) })
	w.Stop() // no poll overwrites the notification's message
	if err := b.Store.RememberAnswer(ctx, id, map[string]any{"iban": "DE44 5001 0517 5407 3249 31", "name": "Zoë Álvarez"}); err != nil {
		t.Fatal(err)
	}
	other := operations.NewStore(b.Pool)
	if _, err := other.Observe(ctx, id, operations.Observation{State: operations.StateWorking,
		StatusMessage: "paying zoë ÁLVAREZ from DE44500105175407324931"}, operations.SourceNotification); err != nil {
		t.Fatal(err)
	}
	d := b.Detail(t, id)
	if got := d.Task.StatusMessage; got != "paying [redacted] from DE[redacted]" {
		t.Errorf("status message kept as %q", got)
	}
	raw, _ := json.Marshal(d.Timeline)
	if bytes.Contains(bytes.ToLower(raw), []byte("lvarez")) || bytes.Contains(raw, []byte("5407")) {
		t.Errorf("the timeline keeps the echo: %s", raw)
	}
}
