package receiver

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// JSON-RPC and MCP error codes the receiver answers with.
const (
	// CodeParseError is the JSON-RPC code for a body that is not JSON.
	CodeParseError = -32700
	// CodeInvalidRequest is the JSON-RPC code for a message that is not a valid request.
	CodeInvalidRequest = -32600
	// CodeMethodNotFound is the JSON-RPC code for an unknown or removed method,
	// and, in 2025-11-25, for a task-augmented call to a forbidden tool or a plain
	// call to a required tool.
	CodeMethodNotFound = -32601
	// CodeInvalidParams is the JSON-RPC code for bad params, including an
	// unknown, expired or foreign task id.
	CodeInvalidParams = -32602
	// CodeInternalError is the JSON-RPC code for an internal failure.
	CodeInternalError = -32603
	// CodeHeaderMismatch (2026-07-28) answers a request whose Mcp-Method,
	// Mcp-Name or MCP-Protocol-Version header disagrees with its body.
	CodeHeaderMismatch = -32020
	// CodeMissingCapability (2026-07-28) answers a request that needs a client
	// capability (the tasks extension) the request did not declare.
	CodeMissingCapability = -32021
	// CodeUnsupportedVersion (2026-07-28) answers a request for a protocol
	// version the receiver does not speak; data.supported lists the ones it does.
	CodeUnsupportedVersion = -32022
)

// Protocol versions and well-known _meta keys.
const (
	// VersionLegacy is the 2025-11-25 revision with core (experimental) Tasks.
	VersionLegacy = "2025-11-25"
	// VersionExtension is the 2026-07-28 revision with the Tasks extension.
	VersionExtension = "2026-07-28"
	// ExtensionTasks is the extension identifier of 2026-07-28 Tasks.
	ExtensionTasks = "io.modelcontextprotocol/tasks"
	// MetaRelatedTask is the 2025-11-25 related-task _meta key.
	MetaRelatedTask = "io.modelcontextprotocol/related-task"
	// MetaProtocolVersion is the 2026-07-28 per-request protocol version _meta key.
	MetaProtocolVersion = "io.modelcontextprotocol/protocolVersion"
	// MetaClientCapabilities is the 2026-07-28 per-request client capabilities _meta key.
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	// MetaSubscriptionID tags notifications/tasks sent on a subscriptions/listen stream.
	MetaSubscriptionID = "io.modelcontextprotocol/subscriptionId"
	// MetaOperationID is the _meta key carrying Taskgate's operation id on a
	// tools/call; the receiver uses it as the idempotency key when the
	// arguments carry none. "operationId" is accepted too.
	MetaOperationID = "io.taskgate/operation-id"
)

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

func errf(code int, format string, args ...any) *rpcError {
	return &rpcError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// taskNotFound is the one answer for unknown, expired, purged and foreign task
// ids: the wording never tells them apart.
func taskNotFound(id string) *rpcError {
	return errf(CodeInvalidParams, "Task not found: %s", id)
}

// message is any JSON-RPC 2.0 message: request, notification or response.
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func (m *message) hasID() bool {
	return len(m.ID) > 0 && !bytes.Equal(m.ID, []byte("null"))
}

func (m *message) isRequest() bool      { return m.Method != "" && m.hasID() }
func (m *message) isNotification() bool { return m.Method != "" && !m.hasID() }
func (m *message) isResponse() bool {
	return m.Method == "" && m.hasID() && (m.Result != nil || m.Error != nil)
}

// decodeMessage parses one JSON-RPC message and checks its envelope.
func decodeMessage(b []byte) (*message, *rpcError) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, errf(CodeParseError, "Parse error: empty body")
	}
	if b[0] == '[' {
		return nil, errf(CodeInvalidRequest, "Invalid Request: batches are not supported")
	}
	var m message
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return nil, errf(CodeParseError, "Parse error: %v", err)
	}
	if m.JSONRPC != "2.0" {
		return &m, errf(CodeInvalidRequest, "Invalid Request: jsonrpc must be \"2.0\"")
	}
	if m.hasID() {
		var id any
		if err := json.Unmarshal(m.ID, &id); err != nil {
			return &m, errf(CodeInvalidRequest, "Invalid Request: bad id")
		}
		switch id.(type) {
		case string, float64:
		default:
			return &m, errf(CodeInvalidRequest, "Invalid Request: id must be a string or a number")
		}
	}
	if !m.isRequest() && !m.isNotification() && !m.isResponse() {
		return &m, errf(CodeInvalidRequest, "Invalid Request: not a request, notification or response")
	}
	if len(m.Params) > 0 && m.Params[0] != '{' {
		return &m, errf(CodeInvalidRequest, "Invalid Request: params must be an object")
	}
	return &m, nil
}

// response builds a response message to the request id.
func response(id json.RawMessage, result any, rerr *rpcError) map[string]any {
	if id == nil {
		id = json.RawMessage("null")
	}
	m := map[string]any{"jsonrpc": "2.0", "id": id}
	if rerr != nil {
		m["error"] = rerr
	} else {
		m["result"] = result
	}
	return m
}

func notification(method string, params any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
}

func request(id string, method string, params any) map[string]any {
	return map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}
}

// obj is a decoded JSON object.
type obj = map[string]any

// decodeParams decodes request params into a map, tolerating absent params.
func decodeParams(raw json.RawMessage) (obj, *rpcError) {
	p := obj{}
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return p, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, errf(CodeInvalidParams, "Invalid params: %v", err)
	}
	return p, nil
}

func str(m obj, k string) string {
	s, _ := m[k].(string)
	return s
}

func sub(m obj, k string) obj {
	o, _ := m[k].(obj)
	return o
}

func num(m obj, k string) (float64, bool) {
	switch v := m[k].(type) {
	case float64:
		return v, true
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	}
	return 0, false
}
