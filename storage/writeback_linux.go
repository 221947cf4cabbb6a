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

// directAlign is the alignment direct I/O on f needs of offsets, lengths and memory (the larger
// of statx(2)'s two), or 0 where f's filesystem does not do direct I/O or does not say.
func directAlign(f *os.File) int {
	var st unix.Statx_t
	err := controlFd(f, func(fd int) error {
		return unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st)
	})
	if err != nil || st.Mask&unix.STATX_DIOALIGN == 0 || st.Dio_offset_align == 0 {
		return 0
	}
	return int(max(st.Dio_offset_align, st.Dio_mem_align))
}

// setDirect turns O_DIRECT on or off for f's writes from now on.
func setDirect(f *os.File, on bool) error {
	return controlFd(f, func(fd int) error {
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			return err
		}
		if on {
			fl |= unix.O_DIRECT
		} else {
			fl &^= unix.O_DIRECT
		}
		_, err = unix.FcntlInt(uintptr(fd), unix.F_SETFL, fl)
		return err
	})
}
