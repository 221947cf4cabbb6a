package testminio

import "syscall"

// serverAttr puts MinIO in its own process group and kills it with the test process.
func serverAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
