//go:build !linux

package testminio

import "syscall"

func serverAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
