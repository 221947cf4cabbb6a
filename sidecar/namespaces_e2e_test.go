package sidecar_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
)

// TestNamespacesReleasedAfterAnswer: the sidecar holds each contained domain's IPC and network
// namespaces past its answer and lets them go right after (isolation.Domain.CloseHolding), so
// once the calls are answered it holds those of its live spares only, one of each per
// executor, however many calls ran: a sidecar that never releases them holds one more pair per
// call (and runs out of descriptors in the end).
func TestNamespacesReleasedAfterAnswer(t *testing.T) {
	testenv.NeedRoot(t)
	e := newSidecar(t, "--executors", "2")
	e.makeDataset("ns", 2000)
	const calls = 6
	for i := range calls {
		p := e.params(randID("inv-"), "ns", int64(i+1), rpc.OpCreate, fmt.Sprintf("ix%d", i), "id", rpc.IndexBTree)
		if res := e.mutate(p); res.CompletionReason != rpc.CompletionCommitted {
			t.Fatalf("build %d: %+v", i, res)
		}
	}
	ipc, net := foreignNamespaces(t, e.c.Pid())
	for deadline := time.Now().Add(10 * time.Second); ipc > 2 || net > 2; ipc, net = foreignNamespaces(t, e.c.Pid()) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls answered, the sidecar still holds %d IPC and %d network namespaces, want one of each per live spare (2 executors)", calls, ipc, net)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ipc == 0 || net == 0 {
		t.Fatalf("the sidecar holds %d IPC and %d network namespaces of its spares, want one of each per live spare", ipc, net)
	}
}

// foreignNamespaces counts pid's descriptors that link to an IPC or network namespace other
// than its own.
func foreignNamespaces(t *testing.T, pid int) (ipc, net int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ownIPC, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/ipc", pid))
	ownNet, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	for _, ent := range ents {
		l, err := os.Readlink(dir + "/" + ent.Name())
		switch {
		case err != nil:
		case strings.HasPrefix(l, "ipc:") && l != ownIPC:
			ipc++
		case strings.HasPrefix(l, "net:") && l != ownNet:
			net++
		}
	}
	return ipc, net
}
