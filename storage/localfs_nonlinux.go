//go:build unix && !linux

package storage

import "os"

// openBeneath opens rel beneath root one element at a time with O_NOFOLLOW (no openat2 here).
func openBeneath(root *os.File, rel string, mode openMode) (*os.File, error) {
	return walkOpen(root, rel, mode, false)
}
