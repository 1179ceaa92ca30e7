package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// Change is one difference between two manifests.
type Change struct {
	// Kind is era, protocol, server, capability, tool_added, tool_removed, mode or annotation.
	Kind string `json:"kind"`
	// Subject names what changed (a tool, a capability path, a field).
	Subject string `json:"subject"`
	// From and To are the old and new values as text ("" when absent).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// Change kinds.
const (
	ChangeEra         = "era"
	ChangeProtocol    = "protocol"
	ChangeServer      = "server"
	ChangeCapability  = "capability"
	ChangeToolAdded   = "tool_added"
	ChangeToolRemoved = "tool_removed"
	ChangeMode        = "mode"
	ChangeAnnotation  = "annotation"
)

// Diff is what changed from one manifest to another, in a stable order.
type Diff struct {
	Changes []Change `json:"changes"`
}

// Empty reports whether nothing changed.
func (d Diff) Empty() bool { return len(d.Changes) == 0 }

// String describes the diff for people, one change a line.
func (d Diff) String() string {
	var b bytes.Buffer
	for _, c := range d.Changes {
		b.WriteString(c.Sentence())
		b.WriteByte('\n')
	}
	return b.String()
}

// Sentence describes one change for people.
func (c Change) Sentence() string {
	switch c.Kind {
	case ChangeToolAdded:
		return fmt.Sprintf("tool %s added (%s)", c.Subject, c.To)
	case ChangeToolRemoved:
		return fmt.Sprintf("tool %s removed (was %s)", c.Subject, c.From)
	case ChangeMode:
		return fmt.Sprintf("tool %s: mode %s → %s", c.Subject, ModeLabel(c.From), ModeLabel(c.To))
	case ChangeAnnotation:
		return fmt.Sprintf("tool %s: %s", c.Subject, arrow(c.From, c.To))
	}
	return fmt.Sprintf("%s %s: %s", c.Kind, c.Subject, arrow(c.From, c.To))
}

func arrow(from, to string) string {
	if from == "" {
		from = "absent"
	}
	if to == "" {
		to = "absent"
	}
	return from + " → " + to
}

// Compare returns the changes from a to b: era, protocol version, implementation, task
// operations, capabilities (every leaf path), extensions, tools added or removed, mode changes
// and annotation changes. Volatile evidence (time, session) is ignored.
func Compare(a, b *Manifest) Diff {
	var d Diff
	add := func(kind, subject, from, to string) {
		if from != to {
			d.Changes = append(d.Changes, Change{Kind: kind, Subject: subject, From: from, To: to})
		}
	}
	add(ChangeEra, "era", string(a.Era), string(b.Era))
	add(ChangeProtocol, "protocolVersion", a.ProtocolVersion, b.ProtocolVersion)
	add(ChangeServer, "name", a.ServerName, b.ServerName)
	add(ChangeServer, "version", a.ServerVersion, b.ServerVersion)
	ops := func(t TaskOps) map[string]bool {
		return map[string]bool{"tools/call as task": t.ToolsCall, "tasks/get": t.Get, "tasks/result": t.Result,
			"tasks/list": t.List, "tasks/cancel": t.Cancel, "tasks/update": t.Update}
	}
	ao, bo := ops(a.Tasks), ops(b.Tasks)
	for _, k := range sortedKeys(ao) {
		add(ChangeCapability, k, offered(ao[k]), offered(bo[k]))
	}
	ac, bc := flatten(a.Capabilities), flatten(b.Capabilities)
	paths := map[string]bool{}
	for k := range ac {
		paths[k] = true
	}
	for k := range bc {
		paths[k] = true
	}
	for _, k := range sortedKeys(paths) {
		add(ChangeCapability, "capabilities."+k, ac[k], bc[k])
	}
	at, bt := map[string]Tool{}, map[string]Tool{}
	names := map[string]bool{}
	for _, t := range a.Tools {
		at[t.Name], names[t.Name] = t, true
	}
	for _, t := range b.Tools {
		bt[t.Name], names[t.Name] = t, true
	}
	for _, n := range sortedKeys(names) {
		x, inA := at[n]
		y, inB := bt[n]
		switch {
		case !inA:
			d.Changes = append(d.Changes, Change{Kind: ChangeToolAdded, Subject: n, To: y.Mode})
		case !inB:
			d.Changes = append(d.Changes, Change{Kind: ChangeToolRemoved, Subject: n, From: x.Mode})
		default:
			add(ChangeMode, n, x.Mode, y.Mode)
			for _, h := range []struct {
				name string
				x, y *bool
			}{{"readOnlyHint", x.ReadOnlyHint, y.ReadOnlyHint}, {"destructiveHint", x.DestructiveHint, y.DestructiveHint},
				{"idempotentHint", x.IdempotentHint, y.IdempotentHint}} {
				if hint(h.x) != hint(h.y) {
					d.Changes = append(d.Changes, Change{Kind: ChangeAnnotation, Subject: n,
						From: h.name + "=" + hint(h.x), To: h.name + "=" + hint(h.y)})
				}
			}
		}
	}
	return d
}

func offered(b bool) string {
	if b {
		return "offered"
	}
	return "not offered"
}

func hint(b *bool) string {
	if b == nil {
		return "unset"
	}
	return fmt.Sprint(*b)
}

// flatten maps every leaf of a JSON object to its dotted path; an empty object is a leaf "{}".
func flatten(raw json.RawMessage) map[string]string {
	out := map[string]string{}
	if len(raw) == 0 {
		return out
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return out
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, x := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		if prefix == "" {
			return
		}
		b, _ := json.Marshal(v)
		out[prefix] = string(b)
	}
	walk("", v)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
