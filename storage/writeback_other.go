//go:build !linux

package storage

import (
	"errors"
	"os"
)

// startWriteback does nothing where sync_file_range(2) does not exist: the fsync that publishes
// the file writes it all.
func startWriteback(*os.File, int64, int64) error { return nil }

// awaitWriteback does nothing (see startWriteback).
func awaitWriteback(*os.File, int64, int64) error { return nil }

// directAlign is 0: direct I/O is not used here.
func directAlign(*os.File) int { return 0 }

// setDirect is never called where directAlign is 0.
func setDirect(*os.File, bool) error { return errors.ErrUnsupported }
