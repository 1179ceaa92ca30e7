package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
)

// Sentinel errors. Errors returned by this package wrap one or more of these;
// test them with errors.Is. JSON-RPC errors also wrap an *RPCError, which
// errors.As extracts with its code, message and data.
var (
	// ErrUnknownTask: the receiver does not know the task id (unknown,
	// expired and purged, or another authorisation context's task). A
	// -32602 answer to tasks/get, tasks/result, tasks/cancel or tasks/update.
	ErrUnknownTask = errors.New("unknown or expired task")
	// ErrTaskTerminal: a legacy tasks/cancel of a task that is already
	// terminal. The receiver answers -32602 as for an unknown id; the client
	// tells the two apart with a tasks/get, so this never wraps ErrUnknownTask.
	ErrTaskTerminal = errors.New("task already terminal")
	// ErrInvalidParams: a -32602 answer to any other request.
	ErrInvalidParams = errors.New("invalid params")
	// ErrMethodNotFound: a -32601 answer.
	ErrMethodNotFound = errors.New("method not found")
	// ErrInternal: a -32603 answer.
	ErrInternal = errors.New("internal error at the server")
	// ErrRemovedMethod: the extension era has no such method (tasks/result,
	// tasks/list), or the server answered -32601 to one.
	ErrRemovedMethod = errors.New("method removed in the 2026-07-28 extension")

	// ErrNotDelivered: the request certainly did not reach the server (the
	// context ended or the connection was closed before it was sent, or the
	// connection could not be established). Nothing happened at the server.
	ErrNotDelivered = errors.New("request not delivered")
	// ErrTransportLost: the transport broke after the request may have been
	// sent and before its response was read. The request's fate is unknown.
	ErrTransportLost = errors.New("transport lost before the response was read")
	// ErrCreateUnacknowledged: a task-creating tools/call may have reached
	// the server but no CreateTaskResult was read (transport lost, deadline).
	// The task may or may not exist. The call must never be resent; the
	// outcome goes to reconciliation. Always wraps ErrTransportLost or the
	// context error as well.
	ErrCreateUnacknowledged = errors.New("task creation unacknowledged: fate unknown, do not resend")
	// ErrSessionGone: the server no longer knows the Mcp-Session-Id (HTTP
	// 404). The session's tasks may be unreachable from a new session.
	ErrSessionGone = errors.New("session gone (HTTP 404)")
	// ErrUnauthorized: the server refused the credentials (HTTP 401/403).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrClosed: the Conn was closed.
	ErrClosed = errors.New("connection closed")

	// ErrTasksNotAdvertised refuses task augmentation: the server did not
	// advertise capabilities.tasks.requests.tools.call (legacy) or the
	// extension (extension era).
	ErrTasksNotAdvertised = errors.New("server does not advertise task-augmented tools/call")
	// ErrToolForbidsTask refuses task augmentation of a tool whose
	// execution.taskSupport is forbidden or absent.
	ErrToolForbidsTask = errors.New("tool does not support task augmentation")
	// ErrToolRequiresTask refuses a plain call to a tool whose
	// execution.taskSupport is required.
	ErrToolRequiresTask = errors.New("tool requires task augmentation")
	// ErrUnknownTool refuses a call to a tool the server did not list.
	ErrUnknownTool = errors.New("tool not listed by the server")
	// ErrNotSupported: the operation does not exist in this era or the
	// server did not declare it (tasks/list in the extension era, tasks/list
	// or tasks/cancel without the capability, input without a pending request).
	ErrNotSupported = errors.New("operation not supported")

	// ErrResultTooLarge refuses a result over Limits.MaxResult bytes.
	ErrResultTooLarge = errors.New("result exceeds the size limit")
	// ErrMalformed: the server's message does not decode as the protocol
	// requires (missing task id, unknown status, wrong shape).
	ErrMalformed = errors.New("malformed message from server")
	// ErrInvalidTransition: an observed status change is not allowed by the
	// task state machine. The observation is still returned to the caller.
	ErrInvalidTransition = errors.New("invalid task status transition")
	// ErrTaskNotReturned: a task-route tools/call completed without creating
	// a task (extension: resultType complete). The result is attached.
	ErrTaskNotReturned = errors.New("server answered the task route without a task")

	// ErrExtensionRequired: -32021, the call needs the tasks extension
	// declared. errors.As yields *ExtensionRequiredError.
	ErrExtensionRequired = errors.New("missing required client capability (-32021)")
	// ErrHeaderMismatch: -32020, Mcp-Name / Mcp-Method differ from the body.
	ErrHeaderMismatch = errors.New("header mismatch (-32020)")
	// ErrUnsupportedVersion: -32022, the protocol version was refused.
	// errors.As yields *UnsupportedVersionError.
	ErrUnsupportedVersion = errors.New("unsupported protocol version (-32022)")
	// ErrExtensionUnsupported: the server is not a valid extension-era
	// server for tasks (no extension, or it mixes in the legacy shapes).
	ErrExtensionUnsupported = errors.New("server does not support the tasks extension")

	// ErrInputAnswered: the input key was already answered through this Conn.
	ErrInputAnswered = errors.New("input request already answered")
	// ErrUnknownInput: no pending input request has this key.
	ErrUnknownInput = errors.New("no such pending input request")
)

// JSON-RPC and MCP error codes this package maps.
const (
	CodeParseError            = -32700
	CodeInvalidRequest        = -32600
	CodeMethodNotFound        = -32601
	CodeInvalidParams         = -32602
	CodeInternalError         = -32603
	CodeHeaderMismatch        = -32020
	CodeMissingCapability     = -32021
	CodeUnsupportedVersion    = -32022
	maxErrorMessage           = 1024
	maxErrorData              = 16 << 10
	defaultMaxStatusMessage   = 1024
	defaultMaxResult          = 4 << 20
	defaultMaxInputSchemaSize = 64 << 10
)

// RPCError is a JSON-RPC error object received from the server. Message is
// sanitised and bounded; Data is kept raw and bounded.
type RPCError struct {
	// Code is the JSON-RPC error code.
	Code int `json:"code"`
	// Message is the error message.
	Message string `json:"message"`
	// Data is the optional error data.
	Data json.RawMessage `json:"data,omitempty"`
}

// Error implements error.
func (e *RPCError) Error() string {
	return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message)
}

// ExtensionRequiredError is a -32021 answer carrying what the server needs.
type ExtensionRequiredError struct {
	// RPC is the raw error.
	RPC *RPCError
	// RequiredCapabilities is error.data.requiredCapabilities as received.
	RequiredCapabilities json.RawMessage
}

// Error implements error.
func (e *ExtensionRequiredError) Error() string {
	return fmt.Sprintf("%v: required %s", ErrExtensionRequired, string(e.RequiredCapabilities))
}

// Unwrap returns ErrExtensionRequired and the RPC error.
func (e *ExtensionRequiredError) Unwrap() []error { return []error{ErrExtensionRequired, e.RPC} }

// RequiresTasksExtension reports whether the required capabilities name the
// tasks extension.
func (e *ExtensionRequiredError) RequiresTasksExtension() bool {
	var caps struct {
		Extensions map[string]json.RawMessage `json:"extensions"`
	}
	if json.Unmarshal(e.RequiredCapabilities, &caps) != nil {
		return false
	}
	_, ok := caps.Extensions[ExtensionName]
	return ok
}

// UnsupportedVersionError is a -32022 answer with the versions the server
// supports.
type UnsupportedVersionError struct {
	// RPC is the raw error.
	RPC *RPCError
	// Supported is error.data.supported.
	Supported []string
}

// Error implements error.
func (e *UnsupportedVersionError) Error() string {
	return fmt.Sprintf("%v: server supports %s", ErrUnsupportedVersion, strings.Join(e.Supported, ", "))
}

// Unwrap returns ErrUnsupportedVersion and the RPC error.
func (e *UnsupportedVersionError) Unwrap() []error { return []error{ErrUnsupportedVersion, e.RPC} }

// TransitionError reports a status change the state machine forbids.
type TransitionError struct {
	// TaskID is the task.
	TaskID string
	// From and To are the observed statuses.
	From, To Status
}

// Error implements error.
func (e *TransitionError) Error() string {
	return fmt.Sprintf("task %s: %v %s → %s", e.TaskID, ErrInvalidTransition, e.From, e.To)
}

// Unwrap returns ErrInvalidTransition.
func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

// NoTaskError is returned by CreateTask when the extension server answered
// the task route with a complete result instead of a task.
type NoTaskError struct {
	// Result is the tool result the server returned.
	Result *ToolResult
}

// Error implements error.
func (e *NoTaskError) Error() string { return ErrTaskNotReturned.Error() }

// Unwrap returns ErrTaskNotReturned.
func (e *NoTaskError) Unwrap() error { return ErrTaskNotReturned }

// ParseError reports an invalid option value.
type ParseError struct {
	// What names the option.
	What string
	// Value is the rejected value.
	Value string
}

// Error implements error.
func (e *ParseError) Error() string { return fmt.Sprintf("invalid %s %q", e.What, e.Value) }

// taskMethod reports whether method addresses an existing task by id.
func taskMethod(method string) bool {
	switch method {
	case "tasks/get", "tasks/result", "tasks/cancel", "tasks/update":
		return true
	}
	return false
}

// mapRPCError wraps an RPC error in the sentinel its code and method imply.
func mapRPCError(method string, e *RPCError) error {
	switch e.Code {
	case CodeInvalidParams:
		if taskMethod(method) {
			return fmt.Errorf("%w: %w", ErrUnknownTask, e)
		}
		return fmt.Errorf("%w: %w", ErrInvalidParams, e)
	case CodeMethodNotFound:
		return fmt.Errorf("%w: %w", ErrMethodNotFound, e)
	case CodeInternalError:
		return fmt.Errorf("%w: %w", ErrInternal, e)
	case CodeHeaderMismatch:
		return fmt.Errorf("%w: %w", ErrHeaderMismatch, e)
	case CodeMissingCapability:
		var data struct {
			RequiredCapabilities json.RawMessage `json:"requiredCapabilities"`
		}
		_ = json.Unmarshal(e.Data, &data)
		return &ExtensionRequiredError{RPC: e, RequiredCapabilities: data.RequiredCapabilities}
	case CodeUnsupportedVersion:
		var data struct {
			Supported []string `json:"supported"`
		}
		_ = json.Unmarshal(e.Data, &data)
		if len(data.Supported) > 16 {
			data.Supported = data.Supported[:16]
		}
		return &UnsupportedVersionError{RPC: e, Supported: data.Supported}
	}
	return e
}

// classifySendError maps a transport failure of a request to ErrNotDelivered
// when it provably never left, and to ErrTransportLost otherwise. Context
// errors stay visible (errors.Is(err, context.DeadlineExceeded)) and count as
// lost: the request may have been written.
func classifySendError(sent bool, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrSessionGone) || errors.Is(err, ErrUnauthorized) || errors.Is(err, ErrNotDelivered) || errors.Is(err, ErrTransportLost) {
		return err
	}
	if !sent {
		return fmt.Errorf("%w: %w", ErrNotDelivered, err)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return fmt.Errorf("%w: %w", ErrNotDelivered, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTransportLost, err)
	}
	return fmt.Errorf("%w: %w", ErrTransportLost, err)
}
