package worker

import (
	"context"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage"
)

// hang blocks forever. Not `select {}`: in a process with no other goroutine (steward-worker links
// nothing that starts one) the runtime takes that for a deadlock and exits with code 2, where a
// goroutine asleep on a timer is never one.
func hang() {
	for {
		time.Sleep(time.Hour)
	}
}

// earlyFault acts out faults that happen instead of the engine call. stop says Run must return.
func earlyFault(c *enginesdk.Conn, fault string) (exit int, stop bool) {
	switch fault {
	case workerproto.FaultHang:
		hang()
	case workerproto.FaultIgnoreSIGTERM:
		signal.Ignore(syscall.SIGTERM)
		hang()
	case workerproto.FaultSkipResult:
		return 0, true
	case workerproto.FaultGarbage:
		_, _ = c.Out().Write([]byte{0, 0, 0, 12})
		_, _ = io.WriteString(c.Out(), "not json at!")
		hang()
	case workerproto.FaultFlood:
		go func() {
			line := strings.Repeat("flood ", 200) + "\n"
			for {
				_, _ = io.WriteString(os.Stderr, line)
			}
		}()
		for i := int64(0); ; i++ {
			if workerproto.Write(c.Out(), &workerproto.Frame{T: workerproto.TypeProgress, Stage: "flood", Done: i, Total: i + 1}, workerproto.MaxWorkerFrame) != nil {
				hang()
			}
		}
	case workerproto.FaultOOM:
		var hog [][]byte
		for {
			b := make([]byte, 32<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			hog = append(hog, b)
		}
	case workerproto.FaultExitWithChildren:
		// Like native code that forks without close-on-exec: the children keep the worker's
		// end of the protocol pipe open after the worker is gone.
		if f, ok := c.Out().(*os.File); ok {
			for i := 0; i < 3; i++ {
				cmd := exec.Command("/bin/sleep", "3600")
				cmd.ExtraFiles = []*os.File{f}
				_ = cmd.Start()
			}
		}
		return 7, true
	case workerproto.FaultForkBomb:
		for {
			cmd := exec.Command("/bin/sleep", "3600")
			if cmd.Start() != nil {
				time.Sleep(time.Millisecond)
			}
		}
	}
	return 0, false
}

// faultStore wraps store to die after the build's first upload or around the manifest commit,
// for the crash faults, or to hold there, for the hold faults (c carries their progress).
func faultStore(c *enginesdk.Conn, store storage.Store, fault string) storage.Store {
	switch fault {
	case workerproto.FaultHoldBeforeCommit, workerproto.FaultHoldAfterCommit:
		return &holdStore{Store: store, c: c, fault: fault}
	case workerproto.FaultCrashAfterBuild:
		return buildCrashStore{store}
	case workerproto.FaultCrashBeforeCommit, workerproto.FaultCrashAfterCommit:
		return &crashStore{Store: store, after: fault == workerproto.FaultCrashAfterCommit}
	}
	return store
}

// buildCrashStore dies as soon as the build has written an index object: its first Put that
// lands (the built-in engine reserves each object right before its upload).
type buildCrashStore struct{ storage.Store }

func (c buildCrashStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := c.Store.Put(ctx, key, r, size); err != nil {
		return err
	}
	isolation.KillSelf()
	return nil
}

type crashStore struct {
	storage.Store
	after bool
}

// PutIfAbsent of a manifest is the commit: die just before or just after it, with SIGKILL so no
// deferred code or buffered output can soften the crash.
func (c *crashStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if !strings.Contains(key, "_versions/") {
		return c.Store.PutIfAbsent(ctx, key, r, size)
	}
	if !c.after {
		isolation.KillSelf()
	}
	_ = c.Store.PutIfAbsent(ctx, key, r, size)
	isolation.KillSelf()
	return nil
}

// holdStore holds the worker at its manifest commit, before or after it, until the sidecar kills
// it (a cancel, the deadline): the commit's race is then decided by whoever a test lets go first.
// Its progress frame says the worker reached the point.
type holdStore struct {
	storage.Store
	c     *enginesdk.Conn
	fault string
}

func (h *holdStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if !strings.Contains(key, "_versions/") {
		return h.Store.PutIfAbsent(ctx, key, r, size)
	}
	if h.fault == workerproto.FaultHoldAfterCommit {
		if err := h.Store.PutIfAbsent(ctx, key, r, size); err != nil {
			return err // no commit to hold after: the engine answers as it would
		}
	}
	h.c.Progress(workerproto.HoldStage(h.fault), 1, 1)
	hang()
	return nil
}
