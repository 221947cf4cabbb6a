package campaign

import "syscall"

// hostAttr kills a failover host process when the thread that started it exits (PDEATHSIG), so a
// crashed campaign never leaves a host behind. It stays in the campaign's process group: a
// SIGSTOP or SIGKILL of the campaign reaches it too.
func hostAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
