package manifests_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/taskgate/taskgate/manifests"
	"github.com/taskgate/taskgate/mcpclient"
)

func ptr(b bool) *bool { return &b }

func legacyManifest() *manifests.Manifest {
	return &manifests.Manifest{
		Server: "s", Era: mcpclient.EraLegacy, ProtocolVersion: "2025-11-25", ServerName: "peer", ServerVersion: "1.0",
		Session:      manifests.SessionEvidence{At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), SessionIDSHA256: "aa", RawCapabilitiesSHA256: "bb"},
		Capabilities: json.RawMessage(`{"tools":{},"tasks":{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}}`),
		Tasks:        manifests.TaskOps{ToolsCall: true, Get: true, Result: true, List: true, Cancel: true},
		Tools: []manifests.Tool{
			{Name: "b", Mode: manifests.ModeRequired},
			{Name: "a", Mode: manifests.ModeOptional, ReadOnlyHint: ptr(true)},
		},
	}
}

func TestCanonicalIgnoresVolatileEvidenceAndOrder(t *testing.T) {
	t.Parallel()
	a, b := legacyManifest(), legacyManifest()
	b.Session = manifests.SessionEvidence{At: time.Now(), SessionIDSHA256: "cc", RawCapabilitiesSHA256: "dd"}
	b.EraEvidence = mcpclient.Evidence{Method: "initialize", At: time.Now()}
	b.Tools[0], b.Tools[1] = b.Tools[1], b.Tools[0]
	b.Capabilities = json.RawMessage(`{ "tasks": {"requests":{"tools":{"call":{}}},"cancel":{},"list":{}}, "tools": {} }`)
	fa, fb := fingerprint(t, a), fingerprint(t, b)
	if fa != fb || len(fa) != 64 {
		t.Fatalf("fingerprints %s %s", fa, fb)
	}
	ca, _ := a.Canonical()
	if strings.Contains(string(ca), "session") || strings.Contains(string(ca), "2026-01-02") {
		t.Errorf("canonical form holds volatile evidence: %s", ca)
	}
	b.Tools[0].Mode = manifests.ModeForbidden
	if fingerprint(t, b) == fa {
		t.Error("a mode change kept the fingerprint")
	}
}

func TestParseRoundTrip(t *testing.T) {
	t.Parallel()
	m := legacyManifest()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := manifests.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if fingerprint(t, got) != fingerprint(t, m) || got.Session.SessionIDSHA256 != "aa" || got.Tools[0].Name != "a" {
		t.Fatalf("round trip changed the manifest: %+v", got)
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"unknown era":             `{"era":"2024-01-01","tools":[]}`,
		"unknown field":           `{"era":"2025-11-25","tools":[],"surprise":1}`,
		"duplicate tool":          `{"era":"2025-11-25","tools":[{"name":"a","mode":"optional"},{"name":"a","mode":"required"}]}`,
		"tool without name":       `{"era":"2025-11-25","tools":[{"name":"","mode":"optional"}]}`,
		"legacy server-decides":   `{"era":"2025-11-25","tools":[{"name":"a","mode":"server-decides"}]}`,
		"extension with a mode":   `{"era":"2026-07-28","tools":[{"name":"a","mode":"required"}]}`,
		"extension with result":   `{"era":"2026-07-28","tasks":{"result":true},"tools":[]}`,
		"legacy with update":      `{"era":"2025-11-25","tasks":{"update":true},"tools":[]}`,
		"capabilities not object": `{"era":"2025-11-25","capabilities":[1],"tools":[]}`,
		"trailing data":           `{"era":"2025-11-25","tools":[]} {}`,
		"not json":                `era: legacy`,
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := manifests.Parse([]byte(doc)); !errors.Is(err, manifests.ErrInvalid) {
				t.Fatalf("err %v, want ErrInvalid", err)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	a, b := legacyManifest(), legacyManifest()
	b.ServerVersion = "2.0"
	b.Tasks.List = false
	b.Capabilities = json.RawMessage(`{"tools":{},"tasks":{"cancel":{},"requests":{"tools":{"call":{}}}}}`)
	b.Tools = []manifests.Tool{
		{Name: "a", Mode: manifests.ModeRequired, ReadOnlyHint: ptr(false)},
		{Name: "c", Mode: manifests.ModeForbidden},
	}
	d := manifests.Compare(a, b)
	want := map[string]bool{
		"server version: 1.0 → 2.0":                       false,
		"capability tasks/list: offered → not offered":    false,
		"capability capabilities.tasks.list: {} → absent": false,
		"tool a: mode optional → required":                false,
		"tool a: readOnlyHint=true → readOnlyHint=false":  false,
		"tool b removed (was required)":                   false,
		"tool c added (forbidden)":                        false,
	}
	for _, c := range d.Changes {
		s := c.Sentence()
		if _, ok := want[s]; !ok {
			t.Errorf("unexpected change %q", s)
		}
		want[s] = true
	}
	for s, seen := range want {
		if !seen {
			t.Errorf("missing change %q in\n%s", s, d)
		}
	}
	if !manifests.Compare(a, legacyManifest()).Empty() {
		t.Error("identical manifests differ")
	}
	e := legacyManifest()
	e.Era, e.Tasks, e.Tools = mcpclient.EraExtension, manifests.TaskOps{ToolsCall: true, Get: true, Update: true, Cancel: true}, nil
	var era bool
	for _, c := range manifests.Compare(a, e).Changes {
		era = era || c.Kind == manifests.ChangeEra
	}
	if !era {
		t.Error("era change not reported")
	}
}

// FuzzParse checks that the manifest parser never panics and that its canonical form is a
// fixed point: parse → canonical → parse → canonical gives the same bytes and fingerprint.
func FuzzParse(f *testing.F) {
	seed, _ := json.Marshal(legacyManifest())
	f.Add(seed)
	f.Add([]byte(`{"era":"2026-07-28","tasks":{"toolsCall":true,"get":true,"update":true,"cancel":true},"extensions":["io.modelcontextprotocol/tasks"],"tools":[{"name":"x","mode":"server-decides"}]}`))
	f.Add([]byte(`{"era":"2025-11-25","capabilities":{"b":{"z":1,"a":[1,2]},"a":{}},"tools":[{"name":"b","mode":"forbidden","destructiveHint":true},{"name":"a","mode":"optional"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := manifests.Parse(b)
		if err != nil {
			if !errors.Is(err, manifests.ErrInvalid) {
				t.Fatalf("error outside ErrInvalid: %v", err)
			}
			return
		}
		c1, err := m.Canonical()
		if err != nil {
			t.Fatalf("canonical of a parsed manifest: %v", err)
		}
		doc, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := manifests.Parse(doc)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", doc, err)
		}
		c2, err := m2.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		if string(c1) != string(c2) {
			t.Fatalf("canonical form not stable:\n%s\n%s", c1, c2)
		}
		if !manifests.Compare(m, m2).Empty() {
			t.Fatalf("a manifest differs from its round trip: %s", manifests.Compare(m, m2))
		}
	})
}
