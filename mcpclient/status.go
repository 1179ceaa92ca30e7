package mcpclient

import (
	"errors"
	"sync"
)

// ValidateTransition checks one observed status change against the task
// state machine shared by both eras: working → input_required, completed,
// failed, cancelled; input_required → working, completed, failed,
// cancelled; terminal states never change; a status may repeat. An empty
// from means the first observation, which may be any valid status. It
// returns a *TransitionError (wrapping ErrInvalidTransition) or, for an
// unknown status, an error wrapping ErrMalformed.
func ValidateTransition(taskID string, from, to Status) error {
	if !to.Valid() {
		return &TransitionError{TaskID: taskID, From: from, To: to}
	}
	if from == "" || from == to {
		return nil
	}
	if !from.Valid() || from.Terminal() {
		return &TransitionError{TaskID: taskID, From: from, To: to}
	}
	// from is working or input_required, to differs: every other status is
	// reachable from both.
	return nil
}

// statusTracker remembers the last status observed per task on a Conn and
// validates every new observation.
type statusTracker struct {
	mu   sync.Mutex
	last map[string]Status
}

// observe records to for taskID and returns the transition violation, if
// any. A violation does not overwrite a terminal status: terminal is final.
func (s *statusTracker) observe(taskID string, to Status) *TransitionError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = make(map[string]Status)
	}
	from := s.last[taskID]
	if err := ValidateTransition(taskID, from, to); err != nil {
		var te *TransitionError
		errors.As(err, &te)
		if !from.Terminal() {
			s.last[taskID] = to
		}
		return te
	}
	s.last[taskID] = to
	return nil
}

// seed sets the last known status without validation (a watcher resuming
// from stored state).
func (s *statusTracker) seed(taskID string, st Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = make(map[string]Status)
	}
	s.last[taskID] = st
}
