package sidecar

import "golang.org/x/sys/unix"

// imageUnhelpful says why a worker image in dir would not help, or "": on tmpfs it is memory
// that cannot be reclaimed, in small pages unless tmpfs has huge pages.
func imageUnhelpful(dir string) string {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC {
		return "the temp dir is on tmpfs"
	}
	return ""
}
