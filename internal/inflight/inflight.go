// Package inflight bounds work in flight, in all and per peer: a background loop that asks
// many peers (job APIs, systems of record) reserves slots before it claims work, and starts
// each piece only while its peer has fewer than its bound, so one peer that stops answering
// holds a few slots and never the others'.
package inflight

import "sync"

// Bound counts slots reserved in all and entered by key. The zero value is unusable: set
// Total and PerKey.
type Bound struct {
	// Total bounds the slots reserved at once.
	Total int
	// PerKey bounds the slots entered under one key at once.
	PerKey int

	mu   sync.Mutex
	n    int
	keys map[string]int
}

// Reserve takes up to n slots and returns how many it took (0 when none is free).
func (b *Bound) Reserve(n int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := max(0, min(n, b.Total-b.n))
	b.n += k
	return k
}

// Release gives back n reserved slots.
func (b *Bound) Release(n int) {
	b.mu.Lock()
	b.n -= n
	b.mu.Unlock()
}

// Enter starts work under key in a reserved slot, unless key has PerKey entered; the empty key
// always enters and is not counted. Work that entered ends with Leave.
func (b *Bound) Enter(key string) bool {
	if key == "" {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keys[key] >= b.PerKey {
		return false
	}
	if b.keys == nil {
		b.keys = map[string]int{}
	}
	b.keys[key]++
	return true
}

// Leave ends work Enter started under key.
func (b *Bound) Leave(key string) {
	if key == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.keys[key]--; b.keys[key] <= 0 {
		delete(b.keys, key)
	}
}
