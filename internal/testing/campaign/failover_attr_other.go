//go:build !linux

package campaign

import "syscall"

// hostAttr: RunFailover refuses to run off Linux (ErrUnsupported) before it starts a host.
func hostAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
