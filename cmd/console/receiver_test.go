package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestReceiverHostileFlag(t *testing.T) {
	t.Parallel()
	if err := runReceiver(context.Background(), []string{"--hostile", "huge,explode"}, func(string) string { return "" }, io.Discard); err == nil ||
		!strings.Contains(err.Error(), "explode") {
		t.Fatalf("an unknown hostile mode: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- runReceiver(ctx, []string{"--addr", "127.0.0.1:0", "--hostile", "tools"}, func(string) string { return "" }, pw)
	}()
	sc := bufio.NewScanner(pr)
	var hostile bool
	var endpoint string
	for endpoint == "" && sc.Scan() {
		line := sc.Text()
		hostile = hostile || strings.Contains(line, "HOSTILE modes [tools]")
		if _, url, ok := strings.Cut(line, "MCP endpoint "); ok {
			endpoint = url
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !hostile || endpoint == "" {
		t.Fatalf("the receiver did not say it is hostile (%v) or where it listens (%q)", hostile, endpoint)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/list")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if n := strings.Count(string(body), "hostile_tool_"); n < 5000 {
		t.Fatalf("tools/list listed %d hostile tools (status %d, %.300s)", n, resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the receiver did not stop")
	}
}
