package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// rootConfig is /v2vm/root.json; internal/testing/v2vm writes it (its HostRoot).
type rootConfig struct {
	Modules []string // kernel modules (.ko or .ko.xz) in the initramfs, in load order
	Tag     string   // the virtio-9p mount tag of the host's root
	Options string   // 9p mount options besides trans=virtio
	Binds   []string // initramfs directories bound at the same path in the new root
}

// hostRoot makes the host's root, shared read-only over virtio-9p and written through a tmpfs
// overlay, the root of the guest, as switch_root does, and reports whether it did: without
// /v2vm/root.json it does nothing.
func hostRoot() (bool, error) {
	b, err := os.ReadFile("/v2vm/root.json")
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read root.json: %w", err)
	}
	var c rootConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return false, fmt.Errorf("decode root.json: %w", err)
	}
	return true, switchRoot(c)
}

func switchRoot(c rootConfig) error {
	for _, m := range c.Modules {
		if err := insmod(m); err != nil {
			return err
		}
	}
	for _, d := range []string{"/host", "/rw", "/newroot"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	if err := unix.Mount(c.Tag, "/host", "9p", unix.MS_RDONLY, "trans=virtio,"+c.Options); err != nil {
		return fmt.Errorf("mount the host's root (9p %s): %w", c.Tag, err)
	}
	if err := unix.Mount("tmpfs", "/rw", "tmpfs", 0, "mode=755"); err != nil {
		return fmt.Errorf("mount the overlay's tmpfs: %w", err)
	}
	for _, d := range []string{"/rw/upper", "/rw/work"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	if err := unix.Mount("overlay", "/newroot", "overlay", 0, "lowerdir=/host,upperdir=/rw/upper,workdir=/rw/work"); err != nil {
		return fmt.Errorf("mount the overlay root: %w", err)
	}
	for _, d := range c.Binds {
		nd := filepath.Join("/newroot", d)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", nd, err)
		}
		if err := unix.Mount(d, nd, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d, err)
		}
	}
	// switch_root: the new root replaces the initramfs's (which stays below, holding the binds).
	if err := unix.Chdir("/newroot"); err != nil {
		return fmt.Errorf("chdir /newroot: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move the new root onto /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// insmod loads one module; a compressed one is decompressed by the kernel.
func insmod(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("insmod: %w", err)
	}
	defer f.Close()
	flags := 0
	if filepath.Ext(path) != ".ko" {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	if err := unix.FinitModule(int(f.Fd()), "", flags); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("insmod %s: %w", path, err)
	}
	return nil
}
