//go:build linux && !amd64

package hostile

// haveInt80: only an amd64 kernel has the i386 system call ABI.
const haveInt80 = false

func int80Socket() int64 { return -38 } // ENOSYS
