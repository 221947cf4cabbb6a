package dispatch

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/hashicorp/go-hclog"
)

// The dispatcher-process helper: the test binary re-executed with helperEnv set runs one
// dispatcher with its own sidecar child on a store, dispatches every PENDING job, reports, and
// waits to be killed.
const (
	helperEnv    = "STEWARD_DISPATCH_HELPER"
	helperStore  = "STEWARD_DISPATCH_STORE"
	helperBin    = "STEWARD_DISPATCH_BIN"
	helperParent = "STEWARD_DISPATCH_CGROUP"
)

func helperMain() int {
	fail := func(err error) int { fmt.Println("ERROR", err); return 1 }
	s, err := OpenBolt(os.Getenv(helperStore), BoltOptions{})
	if err != nil {
		return fail(err)
	}
	sc, err := startSidecar(os.Getenv(helperBin), os.Getenv(helperParent), hclog.NewNullLogger())
	if err != nil {
		return fail(err)
	}
	c := &counted{Client: sc}
	d, err := New(Config{Store: s, ExecuteDeadline: 60 * time.Second, Logger: hclog.NewNullLogger()})
	if err != nil {
		return fail(err)
	}
	d.AddSidecar("node-1", c)
	for {
		if _, err := d.Round(context.Background()); err != nil {
			return fail(err)
		}
		pending, err := d.List(ListOptions{State: StatePending})
		if err != nil {
			return fail(err)
		}
		if len(pending) == 0 {
			break
		}
	}
	running, _ := d.List(ListOptions{State: StateRunning})
	for c.sends.Load() < int64(len(running)) { // sends start asynchronously
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Printf("RUNNING %d SENDS %d EPOCH %s\n", len(running), c.sends.Load(), c.Epoch())
	select {} // until SIGKILL
}

// TestRealDispatcherProcessRestart SIGKILLs a dispatcher process while its jobs run (hanging
// workers on its sidecar child, which dies with it) and reopens the store in this process with a
// new sidecar: no RUNNING job is ever sent again. The new epoch under the same sidecar name proves
// the old one gone, so the jobs become UNKNOWN with their slots released, and index.resolve
// settles them.
func TestRealDispatcherProcessRestart(t *testing.T) {
	noLeaks(t)
	data := newRealData(t)
	e := realEnv(t, nil)
	var ids []string
	for _, path := range []string{"a", "b"} {
		r := createReq(data.make(path, 1), 1, "by_id", "id")
		r.Fault = "hang"
		ids = append(ids, e.submit(r).ID)
	}
	e.close()

	parent := randID("steward-dispatch-test-")
	t.Cleanup(func() { testsidecar.CheckLeftovers(t, parent) })
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", helperStore+"="+e.path, helperBin+"="+testbin.Steward(t), helperParent+"="+parent)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %v", err)
	}
	var running, sends int
	var epoch string
	if _, err := fmt.Sscanf(line, "RUNNING %d SENDS %d EPOCH %s", &running, &sends, &epoch); err != nil || running != 2 || sends != 2 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q (%v)", strings.TrimSpace(line), err)
	}
	time.Sleep(300 * time.Millisecond) // the workers are hanging now
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	e.open()
	for _, id := range ids {
		if j := e.job(id); j.State != StateRunning || j.Epoch != epoch || !j.SlotHeld {
			t.Fatalf("after the crash: %s %s held %t", j.State, j.Epoch, j.SlotHeld)
		}
	}
	for range 3 { // no sidecar handle for the old epoch yet: nothing is proven, nothing is sent
		if st := e.round(); st != (RoundStats{}) {
			t.Fatalf("round without evidence: %+v", st)
		}
	}
	fresh := launchSidecar(t)
	e.d.AddSidecar("node-1", fresh)
	for _, id := range ids {
		j := e.waitJob(id, "settled", settled)
		if j.State != StateNotCommitted || j.SlotHeld || j.Resolution == nil {
			t.Fatalf("after restart: %s held %t: %s", j.State, j.SlotHeld, historyEvents(j))
		}
		if n := strings.Count(historyEvents(j), "dispatch:"); n != 1 {
			t.Fatalf("%d dispatches: %s", n, historyEvents(j))
		}
	}
	if n := fresh.sends.Load(); n != 0 {
		t.Fatalf("a RUNNING job was sent again: %d sends", n)
	}
	// The names are free; a new job runs once on the new sidecar.
	j := e.submit(createReq(data.ref("a"), data.latest("a"), "BY_ID", "id"))
	e.waitJob(j.ID, "committed", stateIs(StateCommitted))
	if n := fresh.sends.Load(); n != 1 {
		t.Fatalf("%d sends after restart, want 1", n)
	}
}
