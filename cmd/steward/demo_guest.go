package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cba1309c/steward/isolation"
)

// guestStore makes the demo's local store a folder the sidecar's contained workers can write:
// they run as an unprivileged guest (isolation.DefaultGuestID when the sidecar is root, else the
// sidecar's own uid), so as root the folder is made the guest's, and the local store gives what
// it creates below it the same owner. The guest must also be able to search every directory
// above it (the demo's temporary working directory is made so).
func guestStore(store string) error {
	if err := os.MkdirAll(store, 0o755); err != nil {
		return fmt.Errorf("demo store: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.Chown(store, isolation.DefaultGuestID, isolation.DefaultGuestID); err != nil {
		return fmt.Errorf("demo store: hand it to the workers' guest: %w", err)
	}
	return nil
}

// handToStoreOwner gives the tree at dir, written by another tool (Lance's own library, run as
// this process's user), the owner of the local store root it lies in, as the store gives what it
// creates: the contained workers' guest must write there next.
func handToStoreOwner(root, dir string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) == os.Geteuid() {
		return nil
	}
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	})
}
