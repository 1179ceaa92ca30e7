package mcpclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits bound what the client accepts from a server. Zero fields take the
// defaults.
type Limits struct {
	// MaxStatusMessage truncates status and error messages to this many
	// bytes (default 1 KiB).
	MaxStatusMessage int
	// MaxResult refuses tool results larger than this many bytes with
	// ErrResultTooLarge (default 4 MiB).
	MaxResult int
	// MaxMessage refuses any single JSON-RPC message larger than this many
	// bytes on the transports this package reads itself (default
	// MaxResult+64 KiB).
	MaxMessage int
	// MaxDepth refuses tool results whose JSON nests arrays and objects deeper than this
	// (default 64) as ErrMalformed, so nothing kept or served later is deeper.
	MaxDepth int
}

func (l Limits) withDefaults() Limits {
	if l.MaxStatusMessage <= 0 {
		l.MaxStatusMessage = defaultMaxStatusMessage
	}
	if l.MaxResult <= 0 {
		l.MaxResult = defaultMaxResult
	}
	if l.MaxMessage <= 0 {
		l.MaxMessage = l.MaxResult + 64<<10
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = defaultMaxDepth
	}
	return l
}

// defaultMaxDepth is Limits.MaxDepth's default.
const defaultMaxDepth = 64

// jsonDepthOver reports whether the JSON text raw nests arrays and objects deeper than limit.
// Brackets inside strings do not count.
func jsonDepthOver(raw []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > limit {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

// wireMessage is any JSON-RPC 2.0 message.
type wireMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// isRequest, isNotification and isResponse classify the message.
func (m *wireMessage) isRequest() bool      { return m.Method != "" && hasID(m.ID) }
func (m *wireMessage) isNotification() bool { return m.Method != "" && !hasID(m.ID) }
func (m *wireMessage) isResponse() bool {
	return m.Method == "" && hasID(m.ID) && (m.Result != nil || m.Error != nil)
}

func hasID(id json.RawMessage) bool {
	return len(id) > 0 && !bytes.Equal(bytes.TrimSpace(id), []byte("null"))
}

// decodeMessage decodes one JSON-RPC message and sanitises its error.
func decodeMessage(data []byte, lim Limits) (*wireMessage, error) {
	lim = lim.withDefaults()
	if len(data) > lim.MaxMessage {
		return nil, fmt.Errorf("%w: message of %d bytes over the %d-byte limit", ErrResultTooLarge, len(data), lim.MaxMessage)
	}
	var m wireMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if m.JSONRPC != "2.0" {
		return nil, fmt.Errorf("%w: jsonrpc %q", ErrMalformed, truncate(m.JSONRPC, 16))
	}
	if m.Method == "" && m.Result == nil && m.Error == nil {
		return nil, fmt.Errorf("%w: neither method, result nor error", ErrMalformed)
	}
	if m.Error != nil {
		m.Error = sanitizeRPCError(m.Error, lim)
	}
	return &m, nil
}

// sanitizeRPCError bounds and cleans an error object from the server.
func sanitizeRPCError(e *RPCError, lim Limits) *RPCError {
	lim = lim.withDefaults()
	out := &RPCError{Code: e.Code, Message: SanitizeMessage(e.Message, min(lim.MaxStatusMessage, maxErrorMessage))}
	if len(e.Data) <= maxErrorData {
		out.Data = e.Data
	}
	return out
}

// SanitizeMessage strips control characters (keeping none, not even
// newlines), replaces invalid UTF-8 and truncates s to at most max bytes on a
// rune boundary, appending "…" when it cut. Status messages, error messages
// and elicitation messages from servers all pass through it.
func SanitizeMessage(s string, max int) string {
	if max <= 0 {
		max = defaultMaxStatusMessage
	}
	if printableASCII(s) {
		return truncate(s, max) // nothing to strip or replace: the common case costs no copy
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r) {
			if r == '\n' || r == '\t' || r == '\r' {
				b.WriteRune(' ')
			}
			continue
		}
		b.WriteRune(r)
	}
	return truncate(b.String(), max)
}

// printableASCII reports whether s holds only the characters from space to tilde.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// wireTask is a Task as either era puts it on the wire. It is decoded in the same pass as the
// message around it (a tasks/list page decodes all its tasks at once): no field is kept as
// JSON text to be decoded again.
type wireTask struct {
	TaskID         string     `json:"taskId"`
	Status         string     `json:"status"`
	StatusMessage  string     `json:"statusMessage"`
	CreatedAt      string     `json:"createdAt"`
	LastUpdatedAt  string     `json:"lastUpdatedAt"`
	TTL            wireMillis `json:"ttl"`
	PollInterval   wireMillis `json:"pollInterval"`
	TTLMs          wireMillis `json:"ttlMs"`
	PollIntervalMs wireMillis `json:"pollIntervalMs"`
}

// wireMillis is a millisecond count a task carries (ttl, pollInterval) as the decoder read it:
// whether the field was there, and the number or what it was instead. toTask judges it, so
// the task that carried a bad one is named when it is refused.
type wireMillis struct {
	f    float64
	kind millisKind
}

type millisKind uint8

const (
	millisAbsent millisKind = iota
	millisNumber
	millisNull
	millisNotNumber
)

// UnmarshalJSON implements json.Unmarshaler. It never fails: toTask reports a bad count.
func (m *wireMillis) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		m.kind = millisNull
	case len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')):
		// b is one JSON value (the decoder checked it): anything but a number (a string,
		// true, an object) is not a count.
		m.kind = millisNotNumber
	default:
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			m.kind = millisNotNumber
			break
		}
		m.f, m.kind = f, millisNumber
	}
	return nil
}

// duration parses the count: a duration, or unlimited for null. Huge values are clamped;
// negative and non-finite ones refused.
func (m wireMillis) duration() (time.Duration, bool, error) {
	switch m.kind {
	case millisNull:
		return 0, true, nil
	case millisNumber:
	default:
		return 0, false, fmt.Errorf("not a number")
	}
	f := m.f
	if f < 0 {
		return 0, false, fmt.Errorf("negative (%v ms)", f)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false, fmt.Errorf("out of range")
	}
	const maxMs = float64(math.MaxInt64 / int64(time.Millisecond))
	if f > maxMs {
		f = maxMs
	}
	return time.Duration(f * float64(time.Millisecond)), false, nil
}

const maxTaskIDLen = 256

// ValidTaskID reports whether a server's task id is one the client keeps: 1 to 256 printable
// ASCII characters, without space and without the characters that would blur a path, query,
// fragment or quoted text it is placed in (/ ? # % \ " ' < > `).
func ValidTaskID(id string) bool {
	if id == "" || len(id) > maxTaskIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c > '~' || strings.IndexByte("/?#%\\\"'<>`", c) >= 0 {
			return false
		}
	}
	return true
}

// toTask validates a wire task and converts it for era.
func (w *wireTask) toTask(era Era, lim Limits) (Task, error) {
	lim = lim.withDefaults()
	if w.TaskID == "" {
		return Task{}, fmt.Errorf("%w: task without taskId", ErrMalformed)
	}
	if !ValidTaskID(w.TaskID) {
		return Task{}, fmt.Errorf("%w: unusable taskId (%d bytes; at most %d printable ASCII characters, none of space / ? # %% \\ \" ' < > `)",
			ErrMalformed, len(w.TaskID), maxTaskIDLen)
	}
	if w.Status == "" {
		return Task{}, fmt.Errorf("%w: task %s without status", ErrMalformed, w.TaskID)
	}
	st := Status(w.Status)
	if !st.Valid() {
		return Task{}, fmt.Errorf("%w: task %s has unknown status %q", ErrMalformed, w.TaskID, truncate(w.Status, 32))
	}
	t := Task{
		ID:            w.TaskID,
		Status:        st,
		StatusMessage: SanitizeMessage(w.StatusMessage, lim.MaxStatusMessage),
		CreatedAt:     parseTime(w.CreatedAt),
		LastUpdatedAt: parseTime(w.LastUpdatedAt),
		Era:           era,
	}
	ttl, poll := w.TTL, w.PollInterval
	if era == EraExtension {
		if w.TTL.kind != millisAbsent || w.PollInterval.kind != millisAbsent {
			return Task{}, fmt.Errorf("%w: legacy ttl/pollInterval in an extension task", ErrExtensionUnsupported)
		}
		ttl, poll = w.TTLMs, w.PollIntervalMs
	}
	if ttl.kind != millisAbsent {
		d, unlimited, err := ttl.duration()
		if err != nil {
			return Task{}, fmt.Errorf("%w: task %s ttl: %w", ErrMalformed, t.ID, err)
		}
		if !unlimited {
			t.TTL = &d
		}
	}
	if poll.kind != millisAbsent {
		d, _, err := poll.duration()
		if err != nil {
			return Task{}, fmt.Errorf("%w: task %s pollInterval: %w", ErrMalformed, t.ID, err)
		}
		t.PollInterval = d
	}
	return t, nil
}

func parseTime(s string) time.Time {
	if s == "" || len(s) > 64 {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

// decodeTask decodes a flat Task object (tasks/get, tasks/cancel, status
// notifications, list entries).
func decodeTask(raw json.RawMessage, era Era, lim Limits) (Task, error) {
	var w wireTask
	if err := json.Unmarshal(raw, &w); err != nil {
		return Task{}, fmt.Errorf("%w: task: %w", ErrMalformed, err)
	}
	return w.toTask(era, lim)
}

// decodeLegacyCreate decodes a 2025-11-25 CreateTaskResult ({"task":{…}}).
// A plain CallToolResult (no task) is reported as ErrTaskNotReturned with the
// result attached.
func decodeLegacyCreate(raw json.RawMessage, lim Limits) (Task, error) {
	var env struct {
		Task json.RawMessage `json:"task"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return Task{}, fmt.Errorf("%w: create task result: %w", ErrMalformed, err)
	}
	if len(env.Task) == 0 || string(env.Task) == "null" {
		res, err := decodeToolResult(raw, lim)
		if err != nil {
			return Task{}, fmt.Errorf("%w: create task result has no task", ErrMalformed)
		}
		return Task{}, &NoTaskError{Result: res}
	}
	return decodeTask(env.Task, EraLegacy, lim)
}

// decodeToolResult decodes and bounds a CallToolResult.
func decodeToolResult(raw json.RawMessage, lim Limits) (*ToolResult, error) {
	lim = lim.withDefaults()
	if len(raw) > lim.MaxResult {
		return nil, fmt.Errorf("%w: %d bytes over the %d-byte limit", ErrResultTooLarge, len(raw), lim.MaxResult)
	}
	if jsonDepthOver(raw, lim.MaxDepth) {
		return nil, fmt.Errorf("%w: tool result nested deeper than %d levels", ErrMalformed, lim.MaxDepth)
	}
	var w struct {
		Content    json.RawMessage `json:"content"`
		Structured json.RawMessage `json:"structuredContent"`
		IsError    *bool           `json:"isError"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("%w: tool result: %w", ErrMalformed, err)
	}
	if len(w.Content) > 0 && string(w.Content) != "null" {
		var items []json.RawMessage
		if err := json.Unmarshal(w.Content, &items); err != nil {
			return nil, fmt.Errorf("%w: tool result content is not an array", ErrMalformed)
		}
	} else {
		w.Content = nil
	}
	if string(w.Structured) == "null" {
		w.Structured = nil
	}
	r := &ToolResult{Content: w.Content, Structured: w.Structured, Size: len(raw)}
	if w.IsError != nil {
		r.IsError = *w.IsError
	}
	return r, nil
}

// extCallKind is the resultType of an extension tools/call answer.
type extCallKind string

const (
	extComplete      extCallKind = "complete"
	extInputRequired extCallKind = "input_required"
	extTask          extCallKind = "task"
)

// extCallResult is a decoded extension tools/call result.
type extCallResult struct {
	Kind          extCallKind
	Result        *ToolResult
	Task          Task
	InputRequests []InputRequest
	RequestState  string
}

// decodeExtCall decodes an extension tools/call result by resultType.
func decodeExtCall(raw json.RawMessage, lim Limits) (*extCallResult, error) {
	var head struct {
		ResultType    string                     `json:"resultType"`
		Task          json.RawMessage            `json:"task"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  *string                    `json:"requestState"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("%w: tools/call result: %w", ErrMalformed, err)
	}
	if len(head.Task) > 0 && string(head.Task) != "null" {
		return nil, fmt.Errorf("%w: legacy task wrapper in an extension answer", ErrExtensionUnsupported)
	}
	switch head.ResultType {
	case "", string(extComplete):
		res, err := decodeToolResult(raw, lim)
		if err != nil {
			return nil, err
		}
		return &extCallResult{Kind: extComplete, Result: res}, nil
	case string(extTask):
		t, err := decodeTask(raw, EraExtension, lim)
		if err != nil {
			return nil, err
		}
		return &extCallResult{Kind: extTask, Task: t}, nil
	case string(extInputRequired):
		reqs, err := decodeInputRequests("", head.InputRequests, lim)
		if err != nil {
			return nil, err
		}
		out := &extCallResult{Kind: extInputRequired, InputRequests: reqs}
		if head.RequestState != nil {
			if len(*head.RequestState) > lim.withDefaults().MaxResult {
				return nil, fmt.Errorf("%w: requestState", ErrResultTooLarge)
			}
			out.RequestState = *head.RequestState
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown resultType %q", ErrMalformed, truncate(head.ResultType, 32))
}

// decodeExtSnapshot decodes an extension tasks/get result (a DetailedTask),
// parsed by status and not by resultType.
func decodeExtSnapshot(raw json.RawMessage, lim Limits) (Snapshot, error) {
	var w struct {
		wireTask
		Task          json.RawMessage            `json:"task"`
		Result        json.RawMessage            `json:"result"`
		Error         *RPCError                  `json:"error"`
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Snapshot{}, fmt.Errorf("%w: tasks/get result: %w", ErrMalformed, err)
	}
	if len(w.Task) > 0 && string(w.Task) != "null" {
		return Snapshot{}, fmt.Errorf("%w: legacy task wrapper in tasks/get", ErrExtensionUnsupported)
	}
	t, err := w.toTask(EraExtension, lim)
	if err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{Task: t}
	switch t.Status {
	case StatusInputRequired:
		reqs, err := decodeInputRequests(t.ID, w.InputRequests, lim)
		if err != nil {
			return Snapshot{}, err
		}
		s.InputRequests = reqs
	case StatusCompleted:
		o := &Outcome{Status: StatusCompleted, Era: EraExtension}
		if len(w.Result) > 0 && string(w.Result) != "null" {
			res, err := decodeToolResult(w.Result, lim)
			if err != nil {
				return Snapshot{}, err
			}
			o.Result = res
			o.ToolError = res.IsError
		}
		s.Outcome = o
	case StatusFailed:
		o := &Outcome{Status: StatusFailed, Era: EraExtension}
		if w.Error != nil {
			o.Error = sanitizeRPCError(w.Error, lim)
		}
		s.Outcome = o
	case StatusCancelled:
		s.Outcome = &Outcome{Status: StatusCancelled, Era: EraExtension}
	}
	if s.Outcome != nil {
		tc := t
		s.Outcome.Task = &tc
	}
	return s, nil
}

const maxInputRequests = 64

// decodeInputRequests decodes an inputRequests map, sorted by key.
func decodeInputRequests(taskID string, m map[string]json.RawMessage, lim Limits) ([]InputRequest, error) {
	if len(m) > maxInputRequests {
		return nil, fmt.Errorf("%w: %d input requests", ErrResultTooLarge, len(m))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]InputRequest, 0, len(keys))
	for _, k := range keys {
		if k == "" || len(k) > maxTaskIDLen {
			return nil, fmt.Errorf("%w: input request key", ErrMalformed)
		}
		var w struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(m[k], &w); err != nil {
			return nil, fmt.Errorf("%w: input request %q: %w", ErrMalformed, truncate(k, 64), err)
		}
		r, err := decodeInputParams(taskID, k, w.Method, w.Params, lim)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// decodeInputParams turns a server request's params into an InputRequest.
func decodeInputParams(taskID, key, method string, params json.RawMessage, lim Limits) (InputRequest, error) {
	lim = lim.withDefaults()
	r := InputRequest{TaskID: taskID, Key: key, Method: truncate(method, 64)}
	if method != "elicitation/create" {
		return r, nil
	}
	var p struct {
		Mode            string          `json:"mode"`
		Message         string          `json:"message"`
		RequestedSchema json.RawMessage `json:"requestedSchema"`
		URL             string          `json:"url"`
		ElicitationID   string          `json:"elicitationId"`
	}
	if len(params) > 0 {
		if err := json.Unmarshal(params, &p); err != nil {
			return r, fmt.Errorf("%w: elicitation params: %w", ErrMalformed, err)
		}
	}
	switch p.Mode {
	case "", string(InputForm):
		r.Mode = InputForm
	case string(InputURL):
		r.Mode = InputURL
	default:
		return r, fmt.Errorf("%w: elicitation mode %q", ErrMalformed, truncate(p.Mode, 16))
	}
	r.Message = SanitizeMessage(p.Message, lim.MaxStatusMessage)
	r.URL = truncate(p.URL, 2048)
	r.ElicitationID = truncate(p.ElicitationID, 256)
	if len(p.RequestedSchema) > 0 && string(p.RequestedSchema) != "null" {
		if len(p.RequestedSchema) > defaultMaxInputSchemaSize {
			return r, fmt.Errorf("%w: requested schema", ErrResultTooLarge)
		}
		r.RawSchema = p.RequestedSchema
		var s struct {
			Properties map[string]struct {
				Type json.RawMessage `json:"type"`
			} `json:"properties"`
			Required []string `json:"required"`
		}
		if err := json.Unmarshal(p.RequestedSchema, &s); err != nil {
			return r, fmt.Errorf("%w: requested schema: %w", ErrMalformed, err)
		}
		req := make(map[string]bool, len(s.Required))
		for _, n := range s.Required {
			req[n] = true
		}
		for name, prop := range s.Properties {
			var typ string
			_ = json.Unmarshal(prop.Type, &typ)
			r.RequestedSchema = append(r.RequestedSchema, SchemaField{Name: SanitizeMessage(name, 128), Type: truncate(typ, 32), Required: req[name]})
		}
		sort.Slice(r.RequestedSchema, func(i, j int) bool { return r.RequestedSchema[i].Name < r.RequestedSchema[j].Name })
	}
	return r, nil
}

// pagePool keeps the wire tasks of decoded tasks/list pages for the next page: a watcher
// sweeping many pages allocates them once.
var pagePool = sync.Pool{New: func() any { s := make([]wireTask, 0, 32); return &s }}

// decodeTaskPage decodes a tasks/list result in one pass over its text.
func decodeTaskPage(raw json.RawMessage, lim Limits) (TaskPage, error) {
	buf := pagePool.Get().(*[]wireTask)
	defer func() {
		if cap(*buf) <= 1024 {
			*buf = (*buf)[:0]
			pagePool.Put(buf)
		}
	}()
	clear((*buf)[:cap(*buf)]) // no field of an earlier page shows through a task lacking it
	w := struct {
		Tasks      []wireTask `json:"tasks"`
		NextCursor string     `json:"nextCursor"`
	}{Tasks: (*buf)[:0]}
	err := json.Unmarshal(raw, &w)
	*buf = w.Tasks
	if err != nil {
		return TaskPage{}, fmt.Errorf("%w: tasks/list result: %w", ErrMalformed, err)
	}
	page := TaskPage{NextCursor: w.NextCursor, Tasks: make([]Task, 0, len(w.Tasks))}
	for i := range w.Tasks {
		t, err := w.Tasks[i].toTask(EraLegacy, lim)
		if err != nil {
			return TaskPage{}, err
		}
		page.Tasks = append(page.Tasks, t)
	}
	return page, nil
}

// decodeTools decodes a tools/list page.
func decodeTools(raw json.RawMessage, era Era) ([]Tool, string, error) {
	var w struct {
		Tools []struct {
			Name        string          `json:"name"`
			Title       string          `json:"title"`
			InputSchema json.RawMessage `json:"inputSchema"`
			Execution   *struct {
				TaskSupport string `json:"taskSupport"`
			} `json:"execution"`
			Annotations *struct {
				Title           string `json:"title"`
				ReadOnlyHint    *bool  `json:"readOnlyHint"`
				DestructiveHint *bool  `json:"destructiveHint"`
				IdempotentHint  *bool  `json:"idempotentHint"`
			} `json:"annotations"`
		} `json:"tools"`
		NextCursor string `json:"nextCursor"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, "", fmt.Errorf("%w: tools/list result: %w", ErrMalformed, err)
	}
	out := make([]Tool, 0, len(w.Tools))
	for _, wt := range w.Tools {
		if wt.Name == "" {
			return nil, "", fmt.Errorf("%w: tool without name", ErrMalformed)
		}
		t := Tool{Name: wt.Name, Title: SanitizeMessage(wt.Title, 256), TaskSupport: TaskForbidden, InputSchema: wt.InputSchema}
		if era == EraExtension {
			t.TaskSupport = TaskServerDecides
		} else if wt.Execution != nil {
			switch TaskSupport(wt.Execution.TaskSupport) {
			case TaskOptional:
				t.TaskSupport = TaskOptional
			case TaskRequired:
				t.TaskSupport = TaskRequired
			}
		}
		if a := wt.Annotations; a != nil {
			t.ReadOnlyHint, t.DestructiveHint, t.IdempotentHint = a.ReadOnlyHint, a.DestructiveHint, a.IdempotentHint
			if t.Title == "" {
				t.Title = SanitizeMessage(a.Title, 256)
			}
		}
		out = append(out, t)
	}
	return out, w.NextCursor, nil
}

// decodeCapabilities decodes the task-relevant capability flags.
func decodeCapabilities(raw json.RawMessage, era Era) (Capabilities, error) {
	var w struct {
		Tasks *struct {
			List     json.RawMessage `json:"list"`
			Cancel   json.RawMessage `json:"cancel"`
			Requests *struct {
				Tools *struct {
					Call json.RawMessage `json:"call"`
				} `json:"tools"`
			} `json:"requests"`
		} `json:"tasks"`
		Extensions    map[string]json.RawMessage `json:"extensions"`
		Subscriptions json.RawMessage            `json:"subscriptions"`
	}
	if len(raw) == 0 {
		return Capabilities{Known: true}, nil
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return Capabilities{}, fmt.Errorf("%w: capabilities: %w", ErrMalformed, err)
	}
	present := func(r json.RawMessage) bool { return len(r) > 0 && string(r) != "null" }
	c := Capabilities{Known: true}
	if w.Tasks != nil {
		c.Tasks = true
		c.TasksList = present(w.Tasks.List)
		c.TasksCancel = present(w.Tasks.Cancel)
		c.TasksToolsCall = w.Tasks.Requests != nil && w.Tasks.Requests.Tools != nil && present(w.Tasks.Requests.Tools.Call)
	}
	if era == EraExtension {
		// A modern server must not advertise capabilities.tasks; one that
		// does is treated as not supporting the extension.
		c.Extension = present(w.Extensions[ExtensionName]) && !c.Tasks
		c.Subscriptions = present(w.Subscriptions)
	}
	return c, nil
}
