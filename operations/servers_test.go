package operations_test

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/taskgate/taskgate/config"
	"github.com/taskgate/taskgate/operations"
	"github.com/taskgate/taskgate/receiver"
)

// A dial to a server that accepts and never answers holds up no other server's connection:
// starts and status reads of every other server go on while it hangs.
func TestASlowDialHoldsUpNoOtherServer(t *testing.T) {
	t.Parallel()
	rcv := receiver.New(receiver.Config{Eras: receiver.ErasLegacy})
	t.Cleanup(rcv.Close)
	srv := httptest.NewServer(rcv.Handler())
	t.Cleanup(srv.Close)
	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stuck.Close() })
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			accepted <- c // held open, never answered
		}
	}()
	pol, err := config.Parse(fmt.Appendf(nil, `
tenants: [acme]
owners: [{name: ops, contact: ops@example.com}]
servers:
  - {name: rcv, url: "%s/mcp", era: legacy}
  - {name: stuck, url: "http://%s/mcp", era: legacy}
workflows:
  - {name: a, server: rcv, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s}, owners: [ops]}
  - {name: b, server: stuck, tool: work_optional, effect: read_only, task_use: preferred, fallback: {kind: sync, max_duration: 2s}, owners: [ops]}
`, srv.URL, stuck.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	s := operations.NewServers(operations.ServersConfig{Policy: pol})
	t.Cleanup(s.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stuckDone := make(chan error, 1)
	go func() {
		_, err := s.Conn(ctx, "stuck")
		stuckDone <- err
	}()
	select {
	case c := <-accepted:
		t.Cleanup(func() { _ = c.Close() })
	case <-time.After(30 * time.Second):
		t.Fatal("the dial to the stuck server never connected")
	}
	got := make(chan error, 1)
	go func() {
		_, err := s.Conn(context.Background(), "rcv")
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("dial rcv: %v", err)
		}
	case err := <-stuckDone:
		t.Fatalf("the stuck dial ended (%v) before the other server's connection was returned: it waited for it", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the other server's connection waited for the stuck dial")
	}
	select {
	case err := <-stuckDone:
		t.Fatalf("the stuck dial ended on its own: %v", err)
	default:
	}
	cancel()
	if err := <-stuckDone; err == nil {
		t.Fatal("the stuck dial succeeded")
	}
}
