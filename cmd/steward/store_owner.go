package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// storeHandover gives what another tool (Lance's own library through lancectl, run as this
// process's user) writes at dir below a local store root the owner of that root, as the local
// store gives what it creates (storage/localfs_unix.go inheritOwner): contained workers run as
// an unprivileged guest (isolation.DefaultGuestID when the sidecar is root), and a root-owned
// dataset of 0755 dirs and 0644 files is one their engine cannot write into. Only a root process
// hands over, and only to an owner that is not root. The handover covers dir and the folders
// between the root and dir that did not exist before the tool ran; folders that did keep their
// owner.
type storeHandover struct {
	uid, gid int    // the store root's owner
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
	h := &storeHandover{uid: int(st.Uid), gid: int(st.Gid), top: dir}
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
	err := filepath.WalkDir(h.top, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, h.uid, h.gid)
	})
	if err != nil {
		return fmt.Errorf("hand %s to the store root's owner (uid %d): %w", h.top, h.uid, err)
	}
	return nil
}
