package storage

import "testing"

// ForceWalk makes local stores resolve paths element by element (the fallback for kernels
// without openat2) until t ends.
func ForceWalk(t testing.TB) {
	was := noOpenat2.Swap(true)
	t.Cleanup(func() { noOpenat2.Store(was) })
}
