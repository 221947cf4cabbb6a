package storage

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing [off, off+n) of f to the disk and returns
// without waiting for it (sync_file_range(2) SYNC_FILE_RANGE_WRITE). It promises nothing about
// durability: the fsync that publishes the file does, and reports any error of this write.
func startWriteback(f *os.File, off, n int64) error {
	return controlFd(f, func(fd int) error { return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE) })
}

// awaitWriteback waits until the writes of [off, off+n) of f started before are done.
func awaitWriteback(f *os.File, off, n int64) error {
	return controlFd(f, func(fd int) error {
		return unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
	})
}

func controlFd(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
