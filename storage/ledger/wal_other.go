//go:build !linux

package ledger

import "os"

// datasync flushes f (fsync: there is no portable fdatasync).
func datasync(f *os.File) error { return f.Sync() }
