//go:build unix

package boltfile

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockExclusive takes, without waiting, the exclusive flock bbolt takes on a file it opens for
// writing (and that conflicts with its shared flock of a read-only open). The lock lasts until
// the returned file is closed.
func lockExclusive(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrInUse, path)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f, nil
}
