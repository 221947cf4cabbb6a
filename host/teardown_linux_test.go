package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

var subreaperOnce sync.Once

// TestHostSIGKILLTearsDownWithStderrPipe SIGKILLs a host while its sidecar runs a hanging worker.
// The sidecar's stderr is a pipe into the host (go-plugin's log pipe; the drain the spec asks of
// stdio hosts), so the reader is gone with the host: the sidecar must not die of SIGPIPE on its
// next log line, but finish the documented teardown and exit 0 within 2 s, leaving no cgroup.
// This test process is a child subreaper, so the orphaned sidecar re-parents to it and its exit
// status can be read.
func TestHostSIGKILLTearsDownWithStderrPipe(t *testing.T) {
	testenv.NeedRoot(t)
	bin := testbin.Steward(t)
	subreaperOnce.Do(func() {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			t.Fatalf("child subreaper: %v", err)
		}
	})
	for _, mode := range []string{"plugin", "stdio"} {
		t.Run(mode, func(t *testing.T) {
			parent := testbin.RandID("steward-test-")
			t.Cleanup(func() { testsidecar.CheckLeftovers(t, parent) })
			cmd, pid := startHostHelper(t, mode+"-busy", bin,
				"STEWARD_TEST_CGROUP_PARENT="+parent, "STEWARD_STATE_DIR="+t.TempDir())
			if n := testsidecar.Dirs(parent); n == 0 {
				t.Fatalf("no worker domain under %s before the kill", parent)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			ws, err := waitOrphan(pid, 2*time.Second)
			if err != nil {
				t.Fatalf("sidecar %d: %v", pid, err)
			}
			took := time.Since(killed)
			switch {
			case ws.Signaled():
				t.Fatalf("sidecar died of %v %v after its host's SIGKILL instead of tearing down", ws.Signal(), took)
			case ws.ExitStatus() != 0:
				t.Fatalf("sidecar exited %d %v after its host's SIGKILL", ws.ExitStatus(), took)
			}
			if n := testsidecar.Dirs(parent); n != 0 {
				t.Fatalf("%d cgroup directories left under %s after the sidecar exited", n, parent)
			}
			t.Logf("sidecar exited 0 with no cgroup left %v after its host's SIGKILL", took.Round(time.Millisecond))
		})
	}
}

// waitOrphan waits for pid to exit once it is this process's child (after re-parenting), at most d.
func waitOrphan(pid int, d time.Duration) (syscall.WaitStatus, error) {
	deadline := time.Now().Add(d)
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case got == pid:
			return ws, nil
		case err != nil && !errors.Is(err, syscall.ECHILD):
			return ws, err
		case time.Now().After(deadline):
			return ws, fmt.Errorf("still running %v after its host's SIGKILL", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runBusyHost is the host process of TestHostSIGKILLTearsDownWithStderrPipe: it launches a
// sidecar whose stderr it drains, starts a hanging mutation, prints the sidecar's pid once the
// worker runs, and waits to be SIGKILLed.
func runBusyHost(transport string) int {
	ctx := context.Background()
	cfg := host.Config{Path: os.Getenv("STEWARD_TEST_BIN"),
		Logger: hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Info, Output: os.Stderr}),
		Args: []string{"--test-faults", "--executors", "1", "--cgroup-parent", os.Getenv("STEWARD_TEST_CGROUP_PARENT"),
			"--term-grace", "200ms", "--reap-bound", "3s", "--clock-skew", "100ms"}}
	launch := host.LaunchStdio
	if transport == "plugin" {
		launch = host.Launch
	}
	c, err := launch(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "busy host:", err)
		return 1
	}
	go c.Mutate(ctx, rpc.MutateParams{InvocationID: "busy-1", JobID: "busy", Fault: "hang",
		DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
		Dataset:        rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file:///nonexistent"}, Path: "d"},
		PinnedVersion:  1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "i", Columns: []string{"id"}, Type: rpc.IndexBTree}})
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(20 * time.Millisecond) {
		text, err := c.Metrics(ctx)
		if err == nil && strings.Contains(text, "\nsteward_mutate_workers_in_flight 1\n") {
			fmt.Println(c.Pid())
			select {} // wait to be SIGKILLed
		}
	}
	fmt.Fprintln(os.Stderr, "busy host: the worker never ran")
	return 1
}
