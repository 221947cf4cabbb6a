//go:build !linux

package testetcd

import "syscall"

func memberAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
