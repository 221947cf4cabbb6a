//go:build !linux

package storage

import "os"

// startWriteback does nothing where sync_file_range(2) does not exist: the fsync that publishes
// the file writes it all.
func startWriteback(*os.File, int64, int64) error { return nil }

// awaitWriteback does nothing (see startWriteback).
func awaitWriteback(*os.File, int64, int64) error { return nil }
