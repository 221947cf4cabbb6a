package sidecar

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

// stallingS3 is an S3 endpoint that answers, until silence is called, just what custody needs
// to reserve — the bucket exists, no object does (HEAD), and put-if-absent is honoured (the
// conditional-write probe: PUT, a refused second PUT, DELETE) — and then holds every request
// open without an answer until the test ends: a store that went down in the slowest way after
// custody checked the names it reserved.
func stallingS3(t *testing.T) (endpoint string, silence func()) {
	var (
		silent atomic.Bool
		mu     sync.Mutex
		put    = map[string]bool{}
	)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bucketOnly := strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 0
		mu.Lock()
		defer mu.Unlock()
		switch {
		case silent.Load():
			mu.Unlock()
			select {
			case <-r.Context().Done():
			case <-done:
			}
			mu.Lock()
		case r.Method == http.MethodHead && bucketOnly:
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodHead:
			w.WriteHeader(http.StatusNotFound)
		case r.Method == http.MethodPut && put[r.URL.Path] && r.Header.Get("If-None-Match") == "*":
			w.WriteHeader(http.StatusPreconditionFailed)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>`)
		case r.Method == http.MethodPut:
			_, _ = io.Copy(io.Discard, r.Body)
			put[r.URL.Path] = true
			w.Header().Set("ETag", `"0"`)
			w.WriteHeader(http.StatusOK)
		case r.Method == http.MethodDelete:
			delete(put, r.URL.Path)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotImplemented)
		}
	}))
	t.Cleanup(func() {
		close(done)
		srv.Close()
	})
	return strings.TrimPrefix(srv.URL, "http://"), func() { silent.Store(true) }
}

// TestCloseStopsPendingSelfFence: an indeterminate invocation's self-fence runs against storage
// that never answers. Close must stop it (not wait out its 15 s bound), leave its tickets in the
// journal for the next start, and leave no goroutine behind.
func TestCloseStopsPendingSelfFence(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // runs last, after the endpoint stops
	endpoint, silence := stallingS3(t)
	dir := t.TempDir()
	s, err := New(Config{DisableIsolation: true, DisableParentWatch: true, StateDir: dir, Logger: hclog.NewNullLogger(),
		S3Credentials: &rpc.Credentials{AccessKey: "k", SecretKey: "s"}, AllowStores: []string{"s3://bucket@" + endpoint}})
	if err != nil {
		t.Fatal(err)
	}
	spec := rpc.StoreSpec{URL: "s3://bucket", Endpoint: endpoint}
	store, err := spec.Parse()
	if err != nil {
		t.Fatal(err)
	}
	j := &job{p: rpc.MutateParams{InvocationID: "inv-fence", PinnedVersion: 1, Dataset: rpc.DatasetRef{Store: spec, Path: "ds"}},
		admitted: admitted{store: store}}
	if err := s.custody.Reserve(context.Background(), invocationOf(j), []string{"ds/data/a.parquet"}, nil); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	silence()                          // from here the store never answers
	s.settleCustody(j)                 // outcome unknown: decided in the background
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
