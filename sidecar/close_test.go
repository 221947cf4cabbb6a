package sidecar

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

// silentEndpoint accepts TCP connections on 127.0.0.1 and never answers: storage that is "down"
// in the slowest way. It stops at cleanup.
func silentEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestCloseStopsPendingSelfFence: an indeterminate invocation's self-fence runs against storage
// that never answers. Close must stop it (not wait out its 15 s bound), leave its tickets in the
// journal for the next start, and leave no goroutine behind.
func TestCloseStopsPendingSelfFence(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last, after the endpoint stops
	endpoint := silentEndpoint(t)
	dir := t.TempDir()
	s, err := New(Config{DisableIsolation: true, DisableParentWatch: true, StateDir: dir, Logger: hclog.NewNullLogger(),
		S3AccessKey: "k", S3SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	j := &job{p: rpc.MutateParams{InvocationID: "inv-fence", PinnedVersion: 1,
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://bucket", Endpoint: endpoint}, Path: "ds"}}}
	if err := s.custody.Reserve(context.Background(), invocationOf(j), []string{"ds/data/a.parquet"}); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	s.settleCustody(j, rpc.MutateResult{Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonWorkerLost})
	time.Sleep(100 * time.Millisecond) // the fence is now waiting on the silent store
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(4 * time.Second):
		t.Fatal("Close waited on a self-fence against storage that never answers")
	}
	// The tickets survive in the journal: a new sidecar on the same state adopts them.
	s2, err := New(Config{DisableIsolation: true, DisableParentWatch: true, StateDir: dir, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s2.custody.Ledger().Status(context.Background(), custody.Owner("inv-fence"))
	if err != nil || st.Held != 1 {
		t.Fatalf("after restart: %+v %v; want the one ticket held", st, err)
	}
	// Stop the second sidecar's recovery before it, too, waits on the silent store.
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
}
