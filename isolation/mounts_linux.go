package isolation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// A contained domain's mount namespace, built by EnterWorker as root of the domain's user
// namespace, before any engine code runs:
//
//  1. every mount private; a /proc of the domain's own PID namespace;
//  2. the trees the launch's Policy names (Read, Exec, Write, Mount) cloned, before step 3
//     hides them;
//  3. the host hidden: every entry of / but the system's trees (keptRoot) under an empty tmpfs
//     (a directory) or /dev/null (anything else but a symlink, which resolves through the
//     entries that are handled), and so /dev/shm, /dev/mqueue and every socket in /dev. No
//     pathname unix socket of the host (/tmp, /run and /var/run, /dev/shm, /home, the
//     sidecar's own directories) has a name in the domain; connect(2) checks only the socket
//     file's mode, which no Landlock right below ABI 9 and no seccomp filter can see past;
//  4. the clones of step 2 put back at their paths, on mount points made in the masks;
//  5. the temp dir: a tmpfs of its own, of EnvTmpBytes, noexec, nosuid and nodev, on the temp
//     dir's host path (TMPDIR, HOME and the working directory);
//  6. every mount read-only and nosuid, then the temp dir's tmpfs read-write again.
//
// The working directory moves into the temp dir (or /): one inherited from the supervisor
// would still reach the tree under a mask by relative paths.

// keptRoot are the entries of / a contained domain sees as the host has them (read-only): the
// system's trees (systemRead's) and /dev, whose devices Landlock limits to systemDevices.
var keptRoot = []string{"bin", "dev", "etc", "lib", "lib32", "lib64", "proc", "sbin", "sys", "usr"}

// hiddenInDev are trees below /dev that other users write in: hidden like a root entry.
var hiddenInDev = []string{"/dev/shm", "/dev/mqueue"}

// tempMountAttrs are the temp dir's tmpfs's mount attributes: nothing written there runs, no
// setuid bit and no device node there means anything. A variable for the tests that take one
// layer of the temp dir's no-exec rule away to prove the other still holds.
var tempMountAttrs uint64 = unix.MOUNT_ATTR_NOEXEC | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV

// tempDir is the domain's private temp dir (TMPDIR), writable through Contain's Landlock rules.
var tempDir string

// hidden and shown are what enterNamespaces hid and put back (the temp dir among the latter):
// Contain refuses an extra path it hid.
var hidden, shown []string

// enterNamespaces builds the worker's mount namespace (see above) and enters its own cgroup
// namespace, rooted at its domain.
func enterNamespaces() error {
	fail := func(op string, err error) error { return fmt.Errorf("%w: %s: %w", ErrContainment, op, err) }
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fail("make mounts private", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail("mount /proc", err)
	}
	tempDir = os.Getenv(EnvTmp)
	size, _ := strconv.ParseInt(os.Getenv(EnvTmpBytes), 10, 64)
	_ = os.Unsetenv(EnvTmp)
	_ = os.Unsetenv(EnvTmpBytes)
	p, err := decodePolicy(os.Getenv(EnvPolicy))
	if err != nil {
		return err
	}
	if err := hideHost(p); err != nil {
		return err
	}
	if tempDir != "" {
		if err := mountTemp(tempDir, size); err != nil {
			return err
		}
	}
	if err := unix.MountSetattr(-1, "/", unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}); err != nil {
		return fail("make mounts read-only", err)
	}
	wd := "/"
	if tempDir != "" {
		if err := unix.MountSetattr(-1, tempDir, 0, &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}); err != nil {
			return fail("make the temp dir writable", err)
		}
		_ = os.Setenv("TMPDIR", tempDir)
		_ = os.Setenv("HOME", tempDir)
		wd = tempDir
	}
	if err := os.Chdir(wd); err != nil {
		return fail("enter "+wd, err)
	}
	return enterCgroupNamespace()
}

// hideHost does steps 2 to 4: the host's trees hidden, the policy's put back, and mount points
// made for them and for the temp dir.
func hideHost(p Policy) error {
	masks, dirs, err := maskTargets()
	if err != nil {
		return err
	}
	keep := topmost(resolved(slices.Concat(p.Read, p.Exec, p.Write, p.Mount)))
	clones := map[string]int{}
	defer func() {
		for _, fd := range clones {
			_ = unix.Close(fd)
		}
	}()
	for _, k := range keep {
		if m := underTree(k, masks); m == "" || m == k {
			continue // visible as the host has it
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, k, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.ENOENT) {
			continue // the guest could not reach it on the host either
		}
		if err != nil {
			return fmt.Errorf("%w: clone %s: %w", ErrContainment, k, err)
		}
		clones[k] = fd
	}
	// A mask that holds mount points gets a tmpfs of its own; the others share one.
	skeleton := map[string]bool{}
	for k := range clones {
		skeleton[underTree(k, masks)] = true
	}
	if m := underTree(tempDir, masks); m != "" {
		skeleton[m] = true
	}
	shared := ""
	for _, m := range masks {
		if slices.Contains(keep, m) {
			continue
		}
		if err := mask(m, dirs[m], skeleton[m], &shared); err != nil {
			return err
		}
		hidden = append(hidden, m)
	}
	for _, k := range keep {
		if fd, ok := clones[k]; ok {
			if err := mountClone(fd, k); err != nil {
				return err
			}
		}
		shown = append(shown, k)
	}
	if tempDir != "" {
		shown = append(shown, tempDir)
		if underTree(tempDir, hidden) != "" {
			if err := os.MkdirAll(tempDir, 0o755); err != nil {
				return fmt.Errorf("%w: temp dir mount point: %w", ErrContainment, err)
			}
		}
	}
	return nil
}

// maskTargets lists what step 3 hides: every entry of / but keptRoot and symlinks, the trees
// of hiddenInDev, and the sockets in /dev; dirs says which of them are directories. The type
// comes from the listing (the directory the entry is in): a stat of a mount point would ask
// the file system mounted there, which may be a network's that does not answer.
func maskTargets() (paths []string, dirs map[string]bool, _ error) {
	dirs = map[string]bool{}
	for _, dir := range []string{"/", "/dev"} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: list %s: %w", ErrContainment, dir, err)
		}
		for _, e := range ents {
			path := filepath.Join(dir, e.Name())
			switch t := e.Type(); {
			case t&os.ModeSymlink != 0:
				continue
			case dir == "/" && !slices.Contains(keptRoot, e.Name()):
			case dir == "/dev" && (t&os.ModeSocket != 0 || slices.Contains(hiddenInDev, path) && t.IsDir()):
			default:
				continue
			}
			paths = append(paths, path)
			dirs[path] = e.IsDir()
		}
	}
	return paths, dirs, nil
}

// mask puts an empty read-only tree over a directory (a tmpfs of its own when mount points are
// to be made in it, else a clone of one shared tmpfs, mounted first at *shared), /dev/null over
// anything else.
func mask(path string, dir, own bool, shared *string) error {
	var (
		fd  int
		err error
	)
	switch {
	case !dir:
		fd, err = unix.OpenTree(unix.AT_FDCWD, os.DevNull, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	case own || *shared == "":
		fd, err = newTmpfs(unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, "size=64k", "mode=0755")
	default:
		fd, err = unix.OpenTree(unix.AT_FDCWD, *shared, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	}
	if err != nil {
		return fmt.Errorf("%w: mask for %s: %w", ErrContainment, path, err)
	}
	defer unix.Close(fd)
	err = unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH)
	if errors.Is(err, unix.ENOENT) {
		return nil // gone since the listing
	}
	if err != nil {
		return fmt.Errorf("%w: hide %s: %w", ErrContainment, path, err)
	}
	if dir && !own && *shared == "" {
		*shared = path
	}
	return nil
}

// mountClone puts a clone of step 2 back at path, making its mount point in the mask.
func mountClone(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: stat clone of %s: %w", ErrContainment, path, err)
	}
	err := os.MkdirAll(filepath.Dir(path), 0o755)
	if err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(path, 0o755)
	} else if err == nil {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644); err == nil {
			err = f.Close()
		}
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: mount point %s: %w", ErrContainment, path, err)
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, path, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: put back %s: %w", ErrContainment, path, err)
	}
	return nil
}

// mountTemp mounts the domain's temp dir: a tmpfs of size bytes (its pages are charged to the
// domain's memory cgroup, so it is bounded by the memory limit in any case; its own size makes
// a write past it ENOSPC instead of an OOM kill), with tempMountAttrs.
func mountTemp(dir string, size int64) error {
	opts := []string{"mode=0700"}
	if size > 0 {
		opts = append(opts, "size="+strconv.FormatInt(size, 10))
	}
	fd, err := newTmpfs(tempMountAttrs, opts...)
	if err == nil {
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fd)
	}
	if err != nil {
		return fmt.Errorf("%w: temp dir tmpfs on %s (the guest must be able to reach it): %w", ErrContainment, dir, err)
	}
	return nil
}

// newTmpfs returns a detached mount of a new tmpfs with the given mount attributes and
// key=value options.
func newTmpfs(attrs uint64, opts ...string) (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fs)
	for _, o := range opts {
		k, v, _ := strings.Cut(o, "=")
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return -1, fmt.Errorf("tmpfs %s: %w", o, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, err
	}
	return unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, int(attrs))
}

// bindTree makes dir's tree writable in the read-only mount namespace: a clone of its mount,
// made read-write, noexec, nosuid and nodev, moved back onto dir. A dir that does not exist is
// skipped.
func bindTree(dir string) error {
	tree, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: clone %s: %w", ErrContainment, dir, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY, Attr_set: tempMountAttrs}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		return fmt.Errorf("%w: mount attributes of %s: %w", ErrContainment, dir, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("%w: mount %s: %w", ErrContainment, dir, err)
	}
	return nil
}

// checkShown refuses a path Contain was given that enterNamespaces hid: a tree an engine needs
// goes in Spec.Policy, which the mount namespace is built from.
func checkShown(p Policy) error {
	for _, d := range resolved(slices.Concat(p.Read, p.Exec, p.Write, p.Mount)) {
		if underTree(d, hidden) != "" && underTree(d, shown) == "" {
			return fmt.Errorf("%w: %s is hidden in the domain's mount namespace: name it in Spec.Policy", ErrInvalidSpec, d)
		}
	}
	return nil
}

// resolved returns the paths that exist, each as given and, where that differs, with its
// symlinks resolved: a tree is shown at both names.
func resolved(paths []string) []string {
	var out []string
	for _, p := range paths {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			out = append(out, p)
			if r != p {
				out = append(out, r)
			}
		}
	}
	return out
}

// topmost sorts paths and drops each one inside another.
func topmost(paths []string) []string {
	paths = slices.Clone(paths)
	slices.Sort(paths)
	paths = slices.Compact(paths)
	var out []string
	for _, p := range paths {
		if underTree(p, out) == "" {
			out = append(out, p)
		}
	}
	return out
}

// underTree returns the tree of trees that path is, or lies in ("" when none).
func underTree(path string, trees []string) string {
	for _, t := range trees {
		if path == t || t == "/" || strings.HasPrefix(path, t+"/") {
			return t
		}
	}
	return ""
}
