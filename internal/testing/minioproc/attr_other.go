//go:build !linux

package minioproc

import (
	"errors"
	"syscall"
	"time"
)

func serverAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func cpuOf(int) (time.Duration, error) {
	return 0, errors.New("a process's CPU time is read from /proc on Linux only")
}
