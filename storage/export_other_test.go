//go:build !linux

package storage

import "testing"

// ForceWalk is a no-op: without openat2 local stores always resolve element by element.
func ForceWalk(testing.TB) {}
