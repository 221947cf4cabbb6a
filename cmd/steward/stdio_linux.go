package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// protocolStdout moves the stdio protocol off fd 1: it returns a private, close-on-exec duplicate
// of fd 1 for the JSON-RPC stream and points fd 1 at stderr, so a stray print (a library, a
// panic handler writing to stdout) lands in the log instead of inside a frame.
func protocolStdout() (*os.File, error) {
	fd, err := unix.FcntlInt(uintptr(unix.Stdout), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("steward serve: duplicate stdout: %w", err)
	}
	if err := unix.Dup3(unix.Stderr, unix.Stdout, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("steward serve: point stdout at stderr: %w", err)
	}
	return os.NewFile(uintptr(fd), "protocol-stdout"), nil
}
