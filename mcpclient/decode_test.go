package mcpclient_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/taskgate/taskgate/mcpclient"
)

func TestDecodeTaskBothEras(t *testing.T) {
	t.Parallel()
	lim := mcpclient.Limits{MaxStatusMessage: 16}
	legacy, err := mcpclient.DecodeTaskForTest(json.RawMessage(`{"taskId":"t1","status":"working","statusMessage":"Queued\u0007 for a long while yes","createdAt":"2025-11-30T09:00:00Z","lastUpdatedAt":"2025-11-30T09:00:04Z","ttl":300000,"pollInterval":2000,"_meta":{}}`), mcpclient.EraLegacy, lim)
	if err != nil {
		t.Fatal(err)
	}
	if legacy.TTL == nil || *legacy.TTL != 5*time.Minute || legacy.PollInterval != 2*time.Second || len(legacy.StatusMessage) > 16 || strings.ContainsRune(legacy.StatusMessage, 7) {
		t.Errorf("legacy task %+v", legacy)
	}
	unlimited, err := mcpclient.DecodeTaskForTest(json.RawMessage(`{"taskId":"t2","status":"completed","createdAt":"x","lastUpdatedAt":"","ttl":null}`), mcpclient.EraLegacy, lim)
	if err != nil || unlimited.TTL != nil {
		t.Errorf("null ttl: %+v %v", unlimited, err)
	}
	ext, err := mcpclient.DecodeTaskForTest(json.RawMessage(`{"taskId":"tk","status":"input_required","createdAt":"2026-08-01T09:00:00Z","lastUpdatedAt":"2026-08-01T09:00:00Z","ttlMs":3600000,"pollIntervalMs":2000}`), mcpclient.EraExtension, lim)
	if err != nil || ext.TTL == nil || *ext.TTL != time.Hour || ext.Era != mcpclient.EraExtension {
		t.Errorf("extension task %+v %v", ext, err)
	}
	refusals := map[string]struct {
		raw string
		era mcpclient.Era
		err error
	}{
		"no task id":                  {`{"status":"working"}`, mcpclient.EraLegacy, mcpclient.ErrMalformed},
		"unknown status":              {`{"taskId":"a","status":"paused"}`, mcpclient.EraLegacy, mcpclient.ErrMalformed},
		"negative ttl":                {`{"taskId":"a","status":"working","ttl":-1}`, mcpclient.EraLegacy, mcpclient.ErrMalformed},
		"legacy ttl in the extension": {`{"taskId":"a","status":"working","ttl":5}`, mcpclient.EraExtension, mcpclient.ErrExtensionUnsupported},
		"control characters in id":    {`{"taskId":"a\u0000b","status":"working"}`, mcpclient.EraLegacy, mcpclient.ErrMalformed},
	}
	for name, tc := range refusals {
		if _, err := mcpclient.DecodeTaskForTest(json.RawMessage(tc.raw), tc.era, lim); !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", name, err, tc.err)
		}
	}
}

func TestDecodeLimitsAndShapes(t *testing.T) {
	t.Parallel()
	big := `{"content":[{"type":"text","text":"` + strings.Repeat("x", 2048) + `"}]}`
	if _, err := mcpclient.DecodeToolResultForTest(json.RawMessage(big), mcpclient.Limits{MaxResult: 1024}); !errors.Is(err, mcpclient.ErrResultTooLarge) {
		t.Errorf("oversized result: %v", err)
	}
	if _, err := mcpclient.DecodeLegacyCreateForTest(json.RawMessage(`{"content":[{"type":"text","text":"plain"}]}`), mcpclient.Limits{}); !errors.Is(err, mcpclient.ErrTaskNotReturned) {
		t.Errorf("plain result on the task route: %v", err)
	}
	kinds := map[string]string{
		`{"resultType":"task","taskId":"a","status":"working","ttlMs":null}`: "task",
		`{"resultType":"complete","content":[]}`:                             "complete",
		`{"content":[]}`:                                                     "complete",
		`{"resultType":"input_required","inputRequests":{"q":{"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object"}}}},"requestState":"s"}`: "input_required",
	}
	for raw, want := range kinds {
		got, err := mcpclient.DecodeExtCallForTest(json.RawMessage(raw), mcpclient.Limits{})
		if err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", raw, got, err, want)
		}
	}
	if _, err := mcpclient.DecodeExtCallForTest(json.RawMessage(`{"task":{"taskId":"a","status":"working"}}`), mcpclient.Limits{}); !errors.Is(err, mcpclient.ErrExtensionUnsupported) {
		t.Errorf("legacy wrapper on a modern answer: %v", err)
	}
	// tasks/get is parsed by status even when resultType says "task".
	s, err := mcpclient.DecodeExtSnapshotForTest(json.RawMessage(`{"resultType":"task","taskId":"a","status":"completed","ttlMs":1000,"result":{"content":[],"isError":true}}`), mcpclient.Limits{})
	if err != nil || s.Outcome == nil || !s.Outcome.ToolError || s.Outcome.Describe() != "completed — tool error" {
		t.Errorf("completed tool error snapshot %+v %v", s, err)
	}
	s, err = mcpclient.DecodeExtSnapshotForTest(json.RawMessage(`{"taskId":"a","status":"failed","error":{"code":-32603,"message":"boom\u0000"}}`), mcpclient.Limits{})
	if err != nil || s.Outcome == nil || s.Outcome.Error == nil || s.Outcome.Error.Message != "boom" || s.Outcome.Describe() != "failed — protocol error" {
		t.Errorf("failed snapshot %+v %v", s, err)
	}
}

// FuzzDecodeMessage feeds arbitrary bytes to the JSON-RPC envelope decoder.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":"tg-1","result":{"task":{"taskId":"t","status":"working","ttl":null}}}`,
		`{"jsonrpc":"2.0","id":7,"error":{"code":-32021,"message":"x","data":{"requiredCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`,
		`{"jsonrpc":"2.0","method":"notifications/tasks/status","params":{"taskId":"t","status":"completed","_meta":{}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"elicitation/create","params":{"message":"m","requestedSchema":{"type":"object"}}}`,
		`[]`, `null`, `{"jsonrpc":"1.0"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = mcpclient.DecodeMessageForTest(data, mcpclient.Limits{MaxMessage: 1 << 16})
	})
}

// FuzzDecodeResults feeds arbitrary results to every result decoder of both
// eras and checks the bounds they promise.
func FuzzDecodeResults(f *testing.F) {
	for _, s := range []string{
		`{"task":{"taskId":"t","status":"working","statusMessage":"Queued","createdAt":"2025-11-30T09:00:00Z","lastUpdatedAt":"2025-11-30T09:00:00Z","ttl":300000,"pollInterval":2000}}`,
		`{"resultType":"task","taskId":"tk","status":"working","ttlMs":3600000,"pollIntervalMs":2000}`,
		`{"resultType":"complete","taskId":"tk","status":"input_required","inputRequests":{"q1":{"method":"elicitation/create","params":{"mode":"form","message":"Overwrite?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}}}}`,
		`{"taskId":"tk","status":"failed","error":{"code":-32603,"message":"x"}}`,
		`{"content":[{"type":"text","text":"hi"}],"isError":true,"structuredContent":{"a":1}}`,
		`{"taskId":"t","status":"working","ttl":1e308}`,
	} {
		f.Add([]byte(s))
	}
	lim := mcpclient.Limits{MaxStatusMessage: 64, MaxResult: 1 << 14}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw := json.RawMessage(data)
		check := func(task mcpclient.Task) {
			if len(task.StatusMessage) > 64 || !utf8.ValidString(task.StatusMessage) {
				t.Fatalf("status message not bounded: %q", task.StatusMessage)
			}
			if !task.Status.Valid() || task.ID == "" {
				t.Fatalf("invalid task accepted: %+v", task)
			}
			if task.TTL != nil && *task.TTL < 0 {
				t.Fatalf("negative ttl accepted")
			}
		}
		if task, err := mcpclient.DecodeLegacyCreateForTest(raw, lim); err == nil {
			check(task)
		}
		for _, era := range []mcpclient.Era{mcpclient.EraLegacy, mcpclient.EraExtension} {
			if task, err := mcpclient.DecodeTaskForTest(raw, era, lim); err == nil {
				check(task)
			}
		}
		if s, err := mcpclient.DecodeExtSnapshotForTest(raw, lim); err == nil {
			check(s.Task)
			if s.Task.Status.Terminal() != (s.Outcome != nil) {
				t.Fatalf("outcome presence disagrees with status %s", s.Task.Status)
			}
		}
		_, _ = mcpclient.DecodeExtCallForTest(raw, lim)
		if r, err := mcpclient.DecodeToolResultForTest(raw, lim); err == nil && r.Size > 1<<14 {
			t.Fatalf("oversized result accepted")
		}
	})
}
