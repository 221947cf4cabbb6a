package host

import (
	"os/exec"
	"runtime"
	"syscall"
)

// withPdeathsig makes the kernel SIGTERM the sidecar when the thread that started it exits.
// SIGTERM, not SIGKILL: a sidecar that dies with its host must still kill and reap its worker
// domains and remove their cgroups, and a SIGKILLed one cannot (its next start would have to
// clean up after it). The sidecar also watches its parent through a pidfd, so it stops even if
// something else sent the SIGTERM's cause unnoticed.
func withPdeathsig(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
}

// startLocked runs start on a goroutine locked to its OS thread and keeps that thread alive until
// hold returns. PDEATHSIG fires when the creating *thread* exits (golang/go#27505), so the thread
// must live exactly as long as the sidecar; when the goroutine returns still locked, the runtime
// ends the thread, which kills a sidecar that outlived its host's interest.
func startLocked(start func() error, hold func()) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		err := start()
		errc <- err
		if err == nil {
			hold()
		}
	}()
	return <-errc
}
