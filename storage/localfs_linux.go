package storage

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once the kernel (older than 5.6) or a seccomp filter refuses openat2; the
// store then walks each path one element at a time (walkOpen), which is as strict but slower.
var noOpenat2 atomic.Bool

// openBeneath opens rel beneath root in one openat2 call: RESOLVE_BENEATH keeps the lookup under
// root and RESOLVE_NO_SYMLINKS fails it (ELOOP) on a link anywhere on the way.
func openBeneath(root *os.File, rel string, mode openMode) (*os.File, error) {
	if rel == "" || noOpenat2.Load() {
		return walkOpen(root, rel, mode, false)
	}
	how := unix.OpenHow{
		Flags:   uint64(mode.flags()),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		fd, err := unix.Openat2(int(root.Fd()), rel, &how)
		switch {
		case err == nil:
			return os.NewFile(uintptr(fd), path.Join(root.Name(), rel)), nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue // EAGAIN: a concurrent rename raced the lookup
		case errors.Is(err, unix.ENOSYS):
			noOpenat2.Store(true)
			return walkOpen(root, rel, mode, false)
		case errors.Is(err, unix.EPERM):
			return walkOpen(root, rel, mode, false) // a seccomp filter; the walk says what is true
		case errors.Is(err, unix.ELOOP):
			err = ErrSymlink
		case errors.Is(err, unix.ENOTDIR):
			// A link where a directory was asked for, or a file on the way: the walk says which.
			return walkOpen(root, rel, mode, false)
		case errors.Is(err, unix.EXDEV):
			err = ErrInvalidKey // cannot happen with a valid key: it would escape the root
		}
		return nil, &fs.PathError{Op: "openat2", Path: rel, Err: err}
	}
	return walkOpen(root, rel, mode, false)
}
