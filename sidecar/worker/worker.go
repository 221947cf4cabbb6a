// Package worker is the body of one isolated worker process: `steward worker`, re-executed by the
// sidecar through /proc/self/exe into its own cgroup. It hardens itself (isolation.EnterWorker)
// before it reads anything, announces itself, reads exactly one request, runs the prechecks on the
// pinned snapshot, makes exactly one call into the engine, and writes exactly one result.
//
// The worker never imports the host side (host, plugin); it knows the sidecar only through
// workerproto on its own pipes. Credentials arrive in the request frame and live only in memory.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// Main is `steward worker`: it returns the process exit code.
func Main() int {
	if err := isolation.EnterWorker(); err != nil {
		fmt.Fprintln(os.Stderr, "steward worker: refused:", err)
		return isolation.ExitRefused
	}
	// The protocol pipes arrive without close-on-exec: set it, so that nothing the engine starts
	// holds the sidecar's end of the conversation open after this process is gone.
	for i := 0; i < 2; i++ {
		syscall.CloseOnExec(isolation.ExtraFD(i))
	}
	in := os.NewFile(uintptr(isolation.ExtraFD(0)), "from-sidecar")
	out := os.NewFile(uintptr(isolation.ExtraFD(1)), "to-sidecar")
	if in == nil || out == nil {
		fmt.Fprintln(os.Stderr, "steward worker: protocol pipes missing")
		return 2
	}
	return Run(context.Background(), in, out)
}

// worker holds the pipes; out is shared by progress, custody and the result.
type worker struct {
	in  io.Reader
	mu  sync.Mutex
	out io.Writer
	seq uint64

	lastProgress time.Time
	secrets      []string
}

// Run serves one invocation over in/out and returns the exit code.
func Run(ctx context.Context, in io.Reader, out io.Writer) int {
	w := &worker{in: in, out: out}
	if err := w.send(&workerproto.Frame{T: workerproto.TypeHello, Pid: os.Getpid()}); err != nil {
		return 3
	}
	f, err := workerproto.Read(in, workerproto.MaxRequestFrame)
	if err != nil || f.T != workerproto.TypeRequest {
		fmt.Fprintln(os.Stderr, "steward worker: no valid request:", err)
		return 4
	}
	req := f.Request
	if c := req.Credentials; c != nil {
		w.secrets = []string{c.SecretKey, c.AccessKey, c.SessionToken}
	}
	if exit, stop := w.earlyFault(req.Fault); stop {
		return exit
	}
	res := w.execute(ctx, req)
	res.Message = w.sanitize(res.Message)
	if err := w.send(&workerproto.Frame{T: workerproto.TypeResult, Result: res}); err != nil {
		return 5
	}
	return 0
}

func (w *worker) send(f *workerproto.Frame) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return workerproto.Write(w.out, f, workerproto.MaxWorkerFrame)
}

// sanitize removes any credential from a message that will leave the worker.
func (w *worker) sanitize(msg string) string {
	for _, s := range w.secrets {
		if len(s) >= 4 {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	if len(msg) > 1024 {
		msg = msg[:1024] + "…"
	}
	return msg
}

// progress forwards build progress at most ten times a second (and always the last step).
func (w *worker) progress(done, total int64) {
	now := time.Now()
	if done < total && now.Sub(w.lastProgress) < 100*time.Millisecond {
		return
	}
	w.lastProgress = now
	_ = w.send(&workerproto.Frame{T: workerproto.TypeProgress, Stage: "build", Done: done, Total: total})
}

// reserve asks the sidecar for custody of key before it is uploaded. The sidecar answers on in.
// Uploads happen one at a time inside the engine, so one outstanding reservation suffices.
func (w *worker) reserve(_ context.Context, key string) error {
	w.mu.Lock()
	w.seq++
	seq := w.seq
	err := workerproto.Write(w.out, &workerproto.Frame{T: workerproto.TypeReserve, Seq: seq, Keys: []string{key}}, workerproto.MaxWorkerFrame)
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("reserve %s: %w", key, err)
	}
	f, err := workerproto.Read(w.in, workerproto.MaxRequestFrame)
	if err != nil {
		return fmt.Errorf("reserve %s: %w", key, err)
	}
	if f.T != workerproto.TypeReserved || f.Seq != seq {
		return fmt.Errorf("reserve %s: unexpected answer %q seq %d", key, f.T, f.Seq)
	}
	if f.Error != "" {
		return fmt.Errorf("reserve %s: refused: %s", key, f.Error)
	}
	return nil
}

var errStale = errors.New("pinned version is gone and a newer one exists")
