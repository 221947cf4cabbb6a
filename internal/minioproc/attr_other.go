//go:build !linux

package minioproc

import "syscall"

func serverAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
