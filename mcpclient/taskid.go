package mcpclient

import "fmt"

// TaskIDChangedError reports an answer to a read of one task that names another task: the
// server changed the task's id between reads, or answered for the wrong task.
type TaskIDChangedError struct {
	// Asked is the task id that was read; Answered the id the answer named.
	Asked, Answered string
	// Status is the status the answer reported.
	Status Status
}

// Error implements error.
func (e *TaskIDChangedError) Error() string {
	return fmt.Sprintf("task %s: %v: answer names task %s", e.Asked, ErrMalformed, e.Answered)
}

// Unwrap returns ErrMalformed: the answer is not used.
func (e *TaskIDChangedError) Unwrap() error { return ErrMalformed }
