package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// storeHandover gives what another tool (Lance's own library through lancectl, run as this
// process's user) writes at dir below a local store root the owner of that root, as the local
// store gives what it creates (storage/localfs_unix.go inheritOwner): contained workers run as
// an unprivileged guest (isolation.DefaultGuestID when the sidecar is root), and a root-owned
// dataset of 0755 dirs and 0644 files is one their engine cannot write into. Only a root process
// hands over, and only to an owner that is not root. The handover covers dir and the folders
// between the root and dir that did not exist before the tool ran; folders that did keep their
// owner. The guest owns the store root and may be running in it: the walk goes by directory fd,
// never follows a symlink, and never resolves a path it could have swapped.
type storeHandover struct {
	uid, gid int    // the store root's owner
	root     string // the store root
	top      string // the highest path from the root down to dir that did not exist before
}

// prepareHandover notes, before the tool runs, what it will create under root for dir. It
// returns nil (nothing to hand over) when this process is not root, or the root is missing (the
// tool makes it, as root) or owned by root.
func prepareHandover(root, dir string) (*storeHandover, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	fi, err := os.Stat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("store root: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil, nil
	}
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("%s is not below the store root %s", dir, root)
	}
	h := &storeHandover{uid: int(st.Uid), gid: int(st.Gid), root: root, top: dir}
	p := root
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			h.top = p
			break
		} else if err != nil {
			return nil, fmt.Errorf("store path: %w", err)
		}
	}
	return h, nil
}

// done hands what the tool wrote to the store root's owner (a nil handover does nothing).
func (h *storeHandover) done() error {
	if h == nil {
		return nil
	}
	if err := h.chown(); err != nil {
		return fmt.Errorf("hand %s to the store root's owner (uid %d): %w", h.top, h.uid, err)
	}
	return nil
}

// chown opens the folders from the root down to top's parent without following a symlink and
// hands the tree at top over from there.
func (h *storeHandover) chown() error {
	dir, err := unix.Open(h.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: h.root, Err: err}
	}
	rel, err := filepath.Rel(h.root, h.top)
	if err != nil {
		unix.Close(dir)
		return err
	}
	parts := strings.Split(rel, string(filepath.Separator))
	for _, name := range parts[:len(parts)-1] {
		next, err := openDirAt(dir, name)
		unix.Close(dir)
		if err != nil {
			return &fs.PathError{Op: "openat", Path: name, Err: err}
		}
		dir = next
	}
	defer unix.Close(dir)
	return h.chownAt(dir, parts[len(parts)-1])
}

// chownAt hands name in dir over, and, when it is a directory, everything below it.
func (h *storeHandover) chownAt(dir int, name string) error {
	fd, err := openDirAt(dir, name)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) { // a file or a symlink: not followed
		if err := unix.Fchownat(dir, name, h.uid, h.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "fchownat", Path: name, Err: err}
		}
		return nil
	} else if err != nil {
		return &fs.PathError{Op: "openat", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if err := unix.Fchown(fd, h.uid, h.gid); err != nil {
		return &fs.PathError{Op: "fchown", Path: name, Err: err}
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := h.chownAt(fd, n); err != nil {
			return fmt.Errorf("%s/%w", name, err)
		}
	}
	return nil
}

func openDirAt(dir int, name string) (int, error) {
	return unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}
