package testenv

import (
	"testing"

	"golang.org/x/sys/unix"
)

// NoexecDir returns a GuestDir bind-mounted on itself noexec (unmounted at cleanup): a temp dir
// nothing can be executed from. It needs root (NeedRoot).
func NoexecDir(t testing.TB) string {
	t.Helper()
	NeedRoot(t)
	dir := GuestDir(t)
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_NOEXEC, ""); err != nil {
		t.Fatalf("remount %s noexec: %v", dir, err)
	}
	return dir
}
