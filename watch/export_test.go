package watch

// Crash stops the replica as a kill would: no lease is released and its heartbeat row stays,
// only the beats stop.
func (s *Service) Crash() { s.halt() }
