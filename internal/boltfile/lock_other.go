//go:build !unix

package boltfile

import (
	"fmt"
	"os"
)

// lockExclusive needs flock; without it Quarantine cannot tell that no process has the file open.
func lockExclusive(path string) (*os.File, error) {
	return nil, fmt.Errorf("%w: lock %s", ErrUnsupported, path)
}
