package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// RelatedTaskError is a 2025-11-25 message whose related-task _meta names another task than
// the one it belongs to: a tasks/result answer for task Asked saying it is task Named, or an
// elicitation naming a task this connection never created or observed. The message is not
// used: the result is not taken as the task's outcome, the question is refused.
type RelatedTaskError struct {
	// Asked is the task the message belongs to ("" for an elicitation).
	Asked string
	// Named is the task its related-task _meta names (bounded).
	Named string
}

// Error implements error.
func (e *RelatedTaskError) Error() string {
	if e.Asked == "" {
		return fmt.Sprintf("%v: an elicitation names task %q, which this connection does not know", ErrMalformed, e.Named)
	}
	return fmt.Sprintf("%v: the result of task %q says it belongs to task %q", ErrMalformed, e.Asked, e.Named)
}

// Unwrap returns ErrMalformed.
func (e *RelatedTaskError) Unwrap() error { return ErrMalformed }

// relatedTaskOf returns the task id of a message's related-task _meta ("" when it has none).
func relatedTaskOf(raw json.RawMessage) string {
	var m struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	var rt struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(m.Meta[metaRelatedTask], &rt)
	return rt.TaskID
}

// checkRelatedResult refuses a tasks/result answer whose related-task _meta names another task.
func checkRelatedResult(taskID string, raw json.RawMessage) error {
	if named := relatedTaskOf(raw); named != "" && named != taskID {
		return &RelatedTaskError{Asked: taskID, Named: truncate(named, 80)}
	}
	return nil
}

// known reports whether the connection created, observed or was seeded with the task.
func (s *statusTracker) known(taskID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.last[taskID]
	return ok
}

// relatedWait is how long an elicitation naming a task not yet known waits for it: a server
// may ask on the event stream before the CreateTaskResult has been read.
const relatedWait = 2 * time.Second

// awaitKnown reports whether the task is, or within relatedWait becomes, known.
func (s *statusTracker) awaitKnown(ctx context.Context, taskID string) bool {
	deadline := time.Now().Add(relatedWait)
	for !s.known(taskID) {
		if time.Now().After(deadline) || sleepCtx(ctx, 10*time.Millisecond) != nil {
			return false
		}
	}
	return true
}
