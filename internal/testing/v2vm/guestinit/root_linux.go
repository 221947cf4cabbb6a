package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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
	// Init, when set, replaces guestinit once the root is switched (systemd): /v2vm/etc is
	// copied into /etc first, and the init prints the console protocol's markers itself.
	Init []string
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
	if err := switchRoot(c); err != nil {
		return true, err
	}
	if len(c.Init) > 0 {
		return true, execInit(c.Init)
	}
	return true, nil
}

// execInit hands PID 1 to argv on the host's root.
func execInit(argv []string) error {
	// The host's /.dockerenv would make systemd take the VM for a container (and ignore the
	// kernel command line); the overlay hides it. The host's /tmp is large, and
	// systemd-tmpfiles would empty it through the overlay at boot: a tmpfs instead.
	if err := os.Remove("/.dockerenv"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("hide /.dockerenv: %w", err)
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777"); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	err := filepath.WalkDir("/v2vm/etc", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("/v2vm/etc", p)
		to := filepath.Join("/etc", rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		return fmt.Errorf("copy /v2vm/etc: %w", err)
	}
	return fmt.Errorf("exec %s: %w", argv[0], unix.Exec(argv[0], argv, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}))
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
