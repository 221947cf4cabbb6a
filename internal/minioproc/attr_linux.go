package minioproc

import "syscall"

// serverAttr puts MinIO in its own process group and kills it when the thread that started it
// exits (PDEATHSIG), so a crashed test or campaign never leaves a server behind.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
