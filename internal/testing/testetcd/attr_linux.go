package testetcd

import "syscall"

// memberAttr puts a member in its own process group and kills it when the thread that started it
// exits (PDEATHSIG), so a crashed test never leaves an etcd server behind.
func memberAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}
