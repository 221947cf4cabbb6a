package sidecar

import (
	"sync"
	"time"
)

// dedup remembers admitted invocation ids until their retention ends. It is bounded: when full of
// live ids it refuses to admit more rather than forget one early (a forgotten id would let a
// resend execute twice).
type dedup struct {
	mu  sync.Mutex
	ids map[string]time.Time // id → forget after
	cap int
}

func newDedup(capacity int) *dedup { return &dedup{ids: make(map[string]time.Time), cap: capacity} }

// admit records id until expires. It reports dup when id is already remembered and full when the
// set has no room.
func (d *dedup) admit(id string, expires time.Time) (dup, full bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	if exp, ok := d.ids[id]; ok && now.Before(exp) {
		return true, false
	}
	if len(d.ids) >= d.cap {
		for k, exp := range d.ids {
			if !now.Before(exp) {
				delete(d.ids, k)
			}
		}
		if len(d.ids) >= d.cap {
			return false, true
		}
	}
	d.ids[id] = expires
	return false, false
}

// forget drops an id that was rejected at receive: it never ran, so a retry is not a duplicate.
func (d *dedup) forget(id string) {
	d.mu.Lock()
	delete(d.ids, id)
	d.mu.Unlock()
}
