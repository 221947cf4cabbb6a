package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchParent returns a channel closed when the parent process exits. It holds a pidfd of the
// parent, so a recycled pid can never be mistaken for the host; PDEATHSIG alone is not enough
// because it fires on the exit of the parent's *thread* (golang/go#27505) and go-plugin does not
// set it at all.
func watchParent(ctx context.Context) (<-chan struct{}, error) {
	ppid := os.Getppid()
	if ppid <= 1 {
		return nil, errors.New("no parent to watch (started by init)")
	}
	fd, err := unix.PidfdOpen(ppid, 0)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open(%d): %w", ppid, err)
	}
	if os.Getppid() != ppid { // the parent died before we held it
		unix.Close(fd)
		ch := make(chan struct{})
		close(ch)
		return ch, nil
	}
	ch := make(chan struct{})
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for ctx.Err() == nil {
			n, err := unix.Poll(fds, 250)
			if err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
			if n > 0 {
				close(ch)
				return
			}
		}
	}()
	return ch, nil
}
