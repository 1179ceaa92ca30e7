package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// listPageMessage is a tasks/list answer of n tasks as the reference receiver writes it.
func listPageMessage(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"jsonrpc":"2.0","id":"tg-42","result":{"tasks":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"createdAt":"2026-12-02T13:37:10.123Z","lastUpdatedAt":"2026-12-02T13:38:11.456Z","pollInterval":30000,`+
			`"status":"working","statusMessage":"step %d of 12: reconciling ledger entries","taskId":"t_9f2c4e1a7b3d4c58a1e0%06d","ttl":1800000}`, i%12, i)
	}
	b.WriteString(`],"nextCursor":"c_000000000000002a"}}`)
	return []byte(b.String())
}

// BenchmarkDecodeTaskPage decodes a 20-task tasks/list answer as ListTasks does: the JSON-RPC
// message, then the page. What it allocates per page is what a watcher sweeping tasks/list
// allocates per 20 tasks observed.
func BenchmarkDecodeTaskPage(b *testing.B) {
	data := listPageMessage(20)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		m, err := decodeMessage(data, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		page, err := decodeTaskPage(m.Result, Limits{})
		if err != nil || len(page.Tasks) != 20 {
			b.Fatal(len(page.Tasks), err)
		}
	}
}

// TestAPageDecodesNothingOfTheLastOne: pages are decoded into reused memory, so a task that
// lacks a field must not show the field of the task decoded there before, and a refused page
// leaves nothing behind for the next either.
func TestAPageDecodesNothingOfTheLastOne(t *testing.T) {
	full := listPageMessage(20)
	m, err := decodeMessage(full, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := decodeTaskPage(m.Result, Limits{})
	if err != nil || len(first.Tasks) != 20 || first.Tasks[3].TTL == nil || first.Tasks[3].StatusMessage == "" {
		t.Fatalf("first page: %+v %v", first, err)
	}
	bad := json.RawMessage(`{"tasks":[{"taskId":"a","status":"working"},{"taskId":"b","status":"working","ttl":"soon"}]}`)
	if _, err := decodeTaskPage(bad, Limits{}); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "task b ttl") {
		t.Fatalf("a page with a ttl that is not a number: %v", err)
	}
	bare := json.RawMessage(`{"tasks":[{"taskId":"x1","status":"working"},{"taskId":"x2","status":"completed","ttl":null},{"taskId":"x3","status":"working"},{"taskId":"x4","status":"working"}]}`)
	for range 3 {
		page, err := decodeTaskPage(bare, Limits{})
		if err != nil || len(page.Tasks) != 4 || page.NextCursor != "" {
			t.Fatalf("bare page: %+v %v", page, err)
		}
		for _, task := range page.Tasks {
			if task.TTL != nil || task.PollInterval != 0 || task.StatusMessage != "" || !task.CreatedAt.IsZero() || !task.LastUpdatedAt.IsZero() {
				t.Fatalf("task %s shows fields it was not sent: %+v", task.ID, task)
			}
		}
	}
}

// BenchmarkPostTaskPage reads a 20-task tasks/list answer over loopback HTTP and decodes it, as
// a sweep does per page: "length" with the Content-Length most servers send (read into one
// block, no copy), "chunked" without one.
func BenchmarkPostTaskPage(b *testing.B) {
	page := listPageMessage(20)
	for _, declared := range []bool{true, false} {
		name := map[bool]string{true: "length", false: "chunked"}[declared]
		b.Run(name, func(b *testing.B) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if declared {
					w.Header().Set("Content-Length", strconv.Itoa(len(page)))
				} else if f, ok := w.(http.Flusher); ok {
					f.Flush() // headers out first: the body is chunked
				}
				_, _ = w.Write(page)
			}))
			defer srv.Close()
			h := &httpRPC{url: srv.URL, client: NewHTTPClient(0)}
			body := []byte(`{"jsonrpc":"2.0","id":"tg-42","method":"tasks/list","params":{}}`)
			b.ReportAllocs()
			for b.Loop() {
				rep, err := h.post(context.Background(), "tg-42", body, http.Header{}, nil)
				if err != nil || rep.msg == nil {
					b.Fatal(err)
				}
				if p, err := decodeTaskPage(rep.msg.Result, Limits{}); err != nil || len(p.Tasks) != 20 {
					b.Fatal(len(p.Tasks), err)
				}
			}
		})
	}
}
