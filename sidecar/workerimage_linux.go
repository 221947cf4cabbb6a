package sidecar

import "golang.org/x/sys/unix"

// imageUnhelpful says why a worker image in dir would not help or could not run, or "": on
// tmpfs it is memory that cannot be reclaimed, in small pages unless tmpfs has huge pages; on a
// noexec mount nothing can start from it.
func imageUnhelpful(dir string) string {
	var st unix.Statfs_t
	switch {
	case unix.Statfs(dir, &st) != nil:
		return ""
	case st.Type == unix.TMPFS_MAGIC:
		return "the temp dir is on tmpfs"
	case st.Flags&unix.ST_NOEXEC != 0:
		return "the temp dir is on a noexec mount"
	}
	return ""
}
