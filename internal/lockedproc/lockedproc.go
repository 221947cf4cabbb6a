// Package lockedproc starts a long-lived child (a test server: MinIO, an etcd member) from an OS
// thread kept for the child's whole life, so that PDEATHSIG fires when the parent process dies
// and never earlier. It owns nothing else.
package lockedproc

import (
	"os/exec"
	"runtime"
)

// Start starts cmd from a goroutine locked to its OS thread and keeps that thread until the child
// has exited and been reaped: PDEATHSIG fires when the creating *thread* exits (golang/go#27505),
// and the runtime ends a thread whose locked goroutine returns (as host's sidecar waiters do when
// a sidecar dies), so a child started from an ordinary goroutine could be killed by an unrelated
// death. exited receives cmd.Wait's error (it needs room for one value); done is closed after.
func Start(cmd *exec.Cmd, exited chan<- error, done chan<- struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
		close(done)
	}()
	return <-started
}
