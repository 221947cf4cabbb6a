//go:build !linux

package host

import "os/exec"

// withPdeathsig is Linux-only; elsewhere the sidecar relies on stdin EOF and session loss.
func withPdeathsig(*exec.Cmd) {}

func startLocked(start func() error, hold func()) error {
	if err := start(); err != nil {
		return err
	}
	go hold()
	return nil
}
