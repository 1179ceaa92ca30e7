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
// validates every new observation. Each observation advances a sequence; a
// request captures the sequence before it is sent (sent), so its answer is
// judged against what was known then: an answer to a request sent before the
// task's terminal status was learned, which contradicts that status, is stale
// (the server answered before it ended), never a violation.
type statusTracker struct {
	mu   sync.Mutex
	last map[string]Status
	seq  uint64
	term map[string]terminalMark
	// stale counts the answers and notifications dropped as stale.
	stale int
}

// terminalMark is when, and from what, a task's terminal status was learned.
type terminalMark struct {
	at uint64
	// ordered: learned from a notification, which a later notification on
	// the stream follows; a request's answer or a seed is not ordered with
	// the notification stream.
	ordered bool
}

// sent returns the sequence a request captures before it is sent.
func (s *statusTracker) sent() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seq
}

// observe records to for taskID and returns the transition violation, if
// any. A violation does not overwrite a terminal status: terminal is final.
func (s *statusTracker) observe(taskID string, to Status) *TransitionError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observeLocked(taskID, to, false)
}

// answer records the status in the answer to a request sent at sequence
// sent. stale reports an answer that contradicts a terminal status learned
// after the request was sent: it is not recorded and is no violation.
func (s *statusTracker) answer(taskID string, to Status, sent uint64) (v *TransitionError, stale bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.term[taskID]; ok && sent < m.at && to != s.last[taskID] {
		s.stale++
		return nil, true
	}
	return s.observeLocked(taskID, to, false), false
}

// notified records the status a notification carries. A notification carries
// no send time: one that contradicts a terminal status learned from a
// request's answer or a seed may have been written before that answer and
// crossed it on another stream, so it is stale (dropped, no violation); one
// that contradicts a terminal status an earlier notification carried is a
// violation.
func (s *statusTracker) notified(taskID string, to Status) (v *TransitionError, stale bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.term[taskID]; ok && !m.ordered && to != s.last[taskID] {
		s.stale++
		return nil, true
	}
	return s.observeLocked(taskID, to, true), false
}

// staleCount returns how many answers and notifications were dropped as stale.
func (s *statusTracker) staleCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale
}

func (s *statusTracker) observeLocked(taskID string, to Status, ordered bool) *TransitionError {
	if s.last == nil {
		s.last = make(map[string]Status)
	}
	s.seq++
	from := s.last[taskID]
	if err := ValidateTransition(taskID, from, to); err != nil {
		var te *TransitionError
		errors.As(err, &te)
		if !from.Terminal() {
			s.setLocked(taskID, to, ordered)
		}
		return te
	}
	s.setLocked(taskID, to, ordered)
	return nil
}

func (s *statusTracker) setLocked(taskID string, st Status, ordered bool) {
	s.last[taskID] = st
	if !st.Terminal() {
		return
	}
	if s.term == nil {
		s.term = make(map[string]terminalMark)
	}
	if _, ok := s.term[taskID]; !ok {
		s.term[taskID] = terminalMark{at: s.seq, ordered: ordered}
	}
}

// seed sets the last known status without validation (a watcher resuming
// from stored state).
func (s *statusTracker) seed(taskID string, st Status) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = make(map[string]Status)
	}
	s.seq++
	s.setLocked(taskID, st, false)
}
