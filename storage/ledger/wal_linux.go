package ledger

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync flushes f's data and what is needed to read it back: the log's blocks are allocated
// when it is made, so an overwrite commits no metadata (fsync would also log its mtime).
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
