package watch

// Crash stops the replica as a kill would: no lease is released and its heartbeat row stays,
// only the beats stop.
func (s *Service) Crash() { s.halt() }

// SweepSegmentPages sets how many pages one segment of a sweep reads, for the tests that run
// with it: sweeps of every test stay correct whatever it is, only their shape changes.
func SweepSegmentPages(n int) { segmentPages.Store(int64(n)) }
