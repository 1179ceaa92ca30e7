// Package manifests records what each MCP server really offers for Tasks: a capability
// manifest built from a fresh session (era with its evidence, negotiated protocol version,
// implementation, session evidence, the task operations offered, every tool's mode and
// annotations), its canonical form and fingerprint, the full history per server, a diff between
// any two versions, and the Prober service that probes every configured server at start, on a
// schedule and on demand.
//
// A conclusion is never cached by server name or SDK version: every probe opens a new session.
// A changed fingerprint voids the gate verdicts of the workflows on that server and pauses their
// promotion, with the reason recorded, in the same transaction that stores the new version.
package manifests

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/taskgate/taskgate/mcpclient"
)

// Sentinel errors.
var (
	// ErrNotFound: no such manifest or server history.
	ErrNotFound = errors.New("manifest not found")
	// ErrInvalid: a manifest document does not decode or breaks a rule of its shape.
	ErrInvalid = errors.New("invalid manifest")
	// ErrUnknownServer: the server is not in the policy.
	ErrUnknownServer = errors.New("server not in the policy")
)

// Tool modes. Legacy servers state execution.taskSupport per tool; in the extension era the
// server decides per call whether a call becomes a task, so a tool's mode is ModeServerDecides.
const (
	ModeForbidden     = string(mcpclient.TaskForbidden)
	ModeOptional      = string(mcpclient.TaskOptional)
	ModeRequired      = string(mcpclient.TaskRequired)
	ModeServerDecides = string(mcpclient.TaskServerDecides)
)

// MaxDocument bounds a manifest document accepted by Parse.
const MaxDocument = 4 << 20

// MaxTools is how many tools a manifest keeps of one server; the rest are counted in
// DroppedTools. MaxToolName bounds a tool's name (the protocol allows 1 to 128 characters):
// a longer one is dropped too.
const (
	MaxTools    = 500
	MaxToolName = 128
)

// Manifest is what one server offered on one fresh session.
type Manifest struct {
	// Server is the configured server name ("" for an ad-hoc probe of a URL).
	Server string `json:"server"`
	// Era is the Tasks wire shape the server speaks: 2025-11-25 core Tasks or the 2026-07-28
	// extension (never one misread as the other).
	Era mcpclient.Era `json:"era"`
	// EraEvidence is how the era was decided (volatile: excluded from the canonical form).
	EraEvidence mcpclient.Evidence `json:"eraEvidence"`
	// ProtocolVersion is the negotiated protocol version.
	ProtocolVersion string `json:"protocolVersion"`
	// ServerName and ServerVersion are the implementation the server reported.
	ServerName    string `json:"serverName"`
	ServerVersion string `json:"serverVersion"`
	// Session is the evidence of the session the manifest was read on (volatile).
	Session SessionEvidence `json:"session"`
	// Capabilities is the server's capabilities object in canonical JSON (sorted keys).
	Capabilities json.RawMessage `json:"capabilities,omitempty"`
	// Tasks are the task operations offered.
	Tasks TaskOps `json:"tasks"`
	// Extensions lists the keys of capabilities.extensions (extension era), sorted.
	Extensions []string `json:"extensions,omitempty"`
	// Tools are the listed tools, sorted by name: at most MaxTools.
	Tools []Tool `json:"tools"`
	// DroppedTools counts the tools the server listed beyond MaxTools or with an over-long
	// name; they were not kept.
	DroppedTools int `json:"droppedTools,omitempty"`
}

// SessionEvidence identifies the session a manifest was read on without keeping secrets.
type SessionEvidence struct {
	// At is when the probe ran.
	At time.Time `json:"at"`
	// SessionIDSHA256 is the hex SHA-256 of the Mcp-Session-Id ("" when the era has none).
	SessionIDSHA256 string `json:"sessionIdSha256,omitempty"`
	// RawCapabilitiesSHA256 is the hex SHA-256 of the capabilities bytes exactly as received.
	RawCapabilitiesSHA256 string `json:"rawCapabilitiesSha256"`
}

// TaskOps are the task operations a server offers.
type TaskOps struct {
	// ToolsCall: tools/call may be task-augmented (legacy tasks.requests.tools.call, or the
	// extension advertised).
	ToolsCall bool `json:"toolsCall"`
	// Get and Result: tasks/get and tasks/result (legacy: implied by tasks.requests.tools.call).
	// The extension era has get but no result.
	Get    bool `json:"get"`
	Result bool `json:"result"`
	// List: tasks/list (legacy tasks.list; the extension has none).
	List bool `json:"list"`
	// Cancel: tasks/cancel (legacy tasks.cancel; comes with the extension).
	Cancel bool `json:"cancel"`
	// Update: tasks/update (extension era only).
	Update bool `json:"update"`
}

// Tool is one tool's task mode and annotations.
type Tool struct {
	// Name is the tool name.
	Name string `json:"name"`
	// Mode is forbidden, optional, required (legacy) or server-decides (extension era).
	Mode string `json:"mode"`
	// ReadOnlyHint, DestructiveHint and IdempotentHint are the annotations; nil when absent.
	ReadOnlyHint    *bool `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool `json:"idempotentHint,omitempty"`
}

// FromInfo builds a manifest from what a fresh connection learnt.
func FromInfo(server string, info mcpclient.ServerInfo, tools []mcpclient.Tool, at time.Time) (*Manifest, error) {
	m := &Manifest{
		Server:          server,
		Era:             info.Era,
		EraEvidence:     info.Evidence,
		ProtocolVersion: info.ProtocolVersion,
		ServerName:      info.Name,
		ServerVersion:   info.Version,
		Session:         SessionEvidence{At: at.UTC(), RawCapabilitiesSHA256: hashHex(info.RawCapabilities)},
	}
	if info.SessionID != "" {
		m.Session.SessionIDSHA256 = hashHex([]byte(info.SessionID))
	}
	if len(info.RawCapabilities) > 0 {
		c, err := canonicalJSON(info.RawCapabilities)
		if err != nil {
			return nil, fmt.Errorf("%w: capabilities: %w", ErrInvalid, err)
		}
		m.Capabilities = c
	}
	caps := info.Capabilities
	switch info.Era {
	case mcpclient.EraExtension:
		var raw struct {
			Extensions map[string]json.RawMessage `json:"extensions"`
		}
		_ = json.Unmarshal(info.RawCapabilities, &raw)
		for k := range raw.Extensions {
			m.Extensions = append(m.Extensions, k)
		}
		if caps.Extension {
			// get, update and cancel come with the extension; there is no result or list.
			m.Tasks = TaskOps{ToolsCall: true, Get: true, Update: true, Cancel: true}
		}
	default:
		m.Tasks = TaskOps{
			ToolsCall: caps.TasksToolsCall,
			Get:       caps.TasksToolsCall,
			Result:    caps.TasksToolsCall,
			List:      caps.TasksList,
			Cancel:    caps.TasksCancel,
		}
	}
	kept := make([]mcpclient.Tool, 0, min(len(tools), MaxTools))
	for _, t := range tools {
		if len(t.Name) > MaxToolName {
			m.DroppedTools++
			continue
		}
		kept = append(kept, t)
	}
	if len(kept) > MaxTools {
		// Keep the first by name, so the same listing always keeps the same tools.
		sort.Slice(kept, func(i, j int) bool { return kept[i].Name < kept[j].Name })
		m.DroppedTools += len(kept) - MaxTools
		kept = kept[:MaxTools]
	}
	for _, t := range kept {
		mode := string(t.TaskSupport)
		if info.Era == mcpclient.EraExtension {
			mode = ModeServerDecides
		}
		if mode == "" {
			mode = ModeForbidden
		}
		m.Tools = append(m.Tools, Tool{Name: t.Name, Mode: mode,
			ReadOnlyHint: t.ReadOnlyHint, DestructiveHint: t.DestructiveHint, IdempotentHint: t.IdempotentHint})
	}
	if err := m.normalize(); err != nil {
		return nil, err
	}
	return m, nil
}

// Tool returns the named tool.
func (m *Manifest) Tool(name string) (Tool, bool) {
	if m == nil {
		return Tool{}, false
	}
	i := sort.Search(len(m.Tools), func(i int) bool { return m.Tools[i].Name >= name })
	if i < len(m.Tools) && m.Tools[i].Name == name {
		return m.Tools[i], true
	}
	for _, t := range m.Tools { // not normalised (built by hand)
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// TaskCapable reports whether a call to tool may be task-augmented: legacy needs
// tasks.requests.tools.call and a tool mode of optional or required; the extension era needs the
// extension advertised and the tool listed.
func (m *Manifest) TaskCapable(tool string) bool {
	if m == nil || !m.Tasks.ToolsCall {
		return false
	}
	t, ok := m.Tool(tool)
	if !ok {
		return false
	}
	switch m.Era {
	case mcpclient.EraLegacy:
		return t.Mode == ModeOptional || t.Mode == ModeRequired
	case mcpclient.EraExtension:
		return true
	}
	return false
}

// normalize sorts the lists and checks the shape.
func (m *Manifest) normalize() error {
	switch m.Era {
	case mcpclient.EraLegacy, mcpclient.EraExtension:
	default:
		return fmt.Errorf("%w: era %q", ErrInvalid, m.Era)
	}
	sort.Strings(m.Extensions)
	for i := 1; i < len(m.Extensions); i++ {
		if m.Extensions[i] == m.Extensions[i-1] {
			return fmt.Errorf("%w: extension %q listed twice", ErrInvalid, m.Extensions[i])
		}
	}
	sort.Slice(m.Tools, func(i, j int) bool { return m.Tools[i].Name < m.Tools[j].Name })
	for i, t := range m.Tools {
		if t.Name == "" {
			return fmt.Errorf("%w: tool without a name", ErrInvalid)
		}
		if i > 0 && m.Tools[i-1].Name == t.Name {
			return fmt.Errorf("%w: tool %q listed twice", ErrInvalid, t.Name)
		}
		switch t.Mode {
		case ModeForbidden, ModeOptional, ModeRequired:
			if m.Era != mcpclient.EraLegacy {
				return fmt.Errorf("%w: tool %q: mode %q outside the 2025-11-25 era", ErrInvalid, t.Name, t.Mode)
			}
		case ModeServerDecides:
			if m.Era != mcpclient.EraExtension {
				return fmt.Errorf("%w: tool %q: mode %q outside the extension era", ErrInvalid, t.Name, t.Mode)
			}
		default:
			return fmt.Errorf("%w: tool %q: mode %q", ErrInvalid, t.Name, t.Mode)
		}
	}
	if m.Era == mcpclient.EraExtension && (m.Tasks.Result || m.Tasks.List) {
		return fmt.Errorf("%w: the extension era has no tasks/result or tasks/list", ErrInvalid)
	}
	if m.Era == mcpclient.EraLegacy && m.Tasks.Update {
		return fmt.Errorf("%w: the 2025-11-25 era has no tasks/update", ErrInvalid)
	}
	if len(m.Capabilities) > 0 {
		c, err := canonicalJSON(m.Capabilities)
		if err != nil {
			return fmt.Errorf("%w: capabilities: %w", ErrInvalid, err)
		}
		m.Capabilities = c
	}
	return nil
}

// canonicalForm is the part of a manifest the fingerprint covers: everything but the volatile
// evidence (probe time, session and raw-bytes hashes, era detection details).
type canonicalForm struct {
	Era             mcpclient.Era   `json:"era"`
	ProtocolVersion string          `json:"protocolVersion"`
	ServerName      string          `json:"serverName"`
	ServerVersion   string          `json:"serverVersion"`
	Capabilities    json.RawMessage `json:"capabilities,omitempty"`
	Tasks           TaskOps         `json:"tasks"`
	Extensions      []string        `json:"extensions,omitempty"`
	Tools           []Tool          `json:"tools"`
	DroppedTools    int             `json:"droppedTools,omitempty"`
}

// Canonical returns the canonical form: stable JSON with sorted lists and keys, without the
// volatile evidence. Two probes of an unchanged server give the same bytes.
func (m *Manifest) Canonical() ([]byte, error) {
	c := *m
	c.Tools = append([]Tool(nil), m.Tools...)
	c.Extensions = append([]string(nil), m.Extensions...)
	if err := c.normalize(); err != nil {
		return nil, err
	}
	tools := c.Tools
	if tools == nil {
		tools = []Tool{}
	}
	return json.Marshal(canonicalForm{
		Era: c.Era, ProtocolVersion: c.ProtocolVersion, ServerName: c.ServerName, ServerVersion: c.ServerVersion,
		Capabilities: c.Capabilities, Tasks: c.Tasks, Extensions: c.Extensions, Tools: tools, DroppedTools: c.DroppedTools,
	})
}

// Fingerprint is the hex SHA-256 of the canonical form.
func (m *Manifest) Fingerprint() (string, error) {
	b, err := m.Canonical()
	if err != nil {
		return "", err
	}
	return hashHex(b), nil
}

// Parse decodes a manifest document (as stored or exchanged), rejecting unknown fields, and
// normalises it.
func Parse(b []byte) (*Manifest, error) {
	if len(b) > MaxDocument {
		return nil, fmt.Errorf("%w: %d bytes, over the %d limit", ErrInvalid, len(b), MaxDocument)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data", ErrInvalid)
	}
	if err := m.normalize(); err != nil {
		return nil, err
	}
	return &m, nil
}

// canonicalJSON re-encodes a JSON value with sorted object keys and no insignificant space.
func canonicalJSON(b []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("want a JSON object")
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func hashHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Short returns the first 12 hex digits of a fingerprint, for pages.
func Short(fingerprint string) string {
	if len(fingerprint) > 12 {
		return fingerprint[:12]
	}
	return fingerprint
}

// ModeLabel describes a tool mode for people.
func ModeLabel(mode string) string {
	switch mode {
	case ModeServerDecides:
		return "server decides per call"
	case "":
		return ModeForbidden
	}
	return strings.ReplaceAll(mode, "_", " ")
}
