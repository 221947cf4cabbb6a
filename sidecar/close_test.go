package sidecar

import (
	"context"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testbin"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

// TestCloseStopsPendingSelfFence: an indeterminate invocation's self-fence runs against storage
// that never answers. Close must stop it (not wait out its 15 s bound), leave its tickets in the
// journal for the next start, and leave no goroutine behind.
func TestCloseStopsPendingSelfFence(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last, after the endpoint stops
	endpoint, _ := testbin.SilentEndpoint(t)
	dir := t.TempDir()
	s, err := New(Config{DisableIsolation: true, DisableParentWatch: true, StateDir: dir, Logger: hclog.NewNullLogger(),
		S3AccessKey: "k", S3SecretKey: "s"})
	if err != nil {
		t.Fatal(err)
	}
	j := &job{p: rpc.MutateParams{InvocationID: "inv-fence", PinnedVersion: 1,
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://bucket", Endpoint: endpoint}, Path: "ds"}}}
	if err := s.custody.Reserve(context.Background(), invocationOf(j), []string{"ds/data/a.parquet"}, nil); err != nil {
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
