package sidecar_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

// pipeConn joins two io.Pipes into one side of a connection.
type pipeConn struct {
	io.Reader
	io.Writer
	closers []io.Closer
}

func (p pipeConn) Close() error {
	for _, c := range p.closers {
		c.Close()
	}
	return nil
}

// serveInProcess runs sidecar.New(cfg) in this process over pipes and returns a client of it and
// a function that ends the session (stdin EOF), waits for RunStdio and closes the server.
func serveInProcess(t *testing.T, cfg sidecar.Config) (*rpc.Client, func()) {
	t.Helper()
	cfg.DisableParentWatch = true
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	srv, err := sidecar.New(cfg)
	if err != nil {
		t.Fatalf("sidecar.New: %v", err)
	}
	hostR, sideW := io.Pipe()
	sideR, hostW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		srv.RunStdio(ctx, sideR, sideW)
		close(ran)
	}()
	c := rpc.NewClient(ctx, pipeConn{Reader: hostR, Writer: hostW, closers: []io.Closer{hostR, hostW}}, rpc.ClientOptions{})
	var stopped bool
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		hostW.Close() // stdin EOF: the documented way to stop a stdio sidecar
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Error("RunStdio did not return 10 s after stdin EOF")
		}
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		c.Close()
		cancel()
	}
	t.Cleanup(stop)
	return c, stop
}

// TestNoIsolationServesAndRefusesMutations: a sidecar whose isolation does not verify (here:
// disabled, and an unusable cgroup parent) starts, reports why in hello, serves metrics and
// objects.*, refuses index.mutate with -32003, starts no executor or spare, and leaves no
// goroutine behind once closed.
func TestNoIsolationServesAndRefusesMutations(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  sidecar.Config
	}{
		{"disabled", sidecar.Config{DisableIsolation: true}},
		{"bad-cgroup-parent", sidecar.Config{Isolation: isolation.Config{Parent: "../escape"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			c, stop := serveInProcess(t, tc.cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var h rpc.HelloResult
			if err := c.Call(ctx, rpc.MethodHello, rpc.HelloParams{ProtocolVersion: rpc.ProtocolVersion}, &h); err != nil {
				t.Fatalf("hello: %v", err)
			}
			if h.Isolation == nil || h.Isolation.Verified || h.Isolation.Mode != "none" || h.Isolation.Reason == "" {
				t.Fatalf("hello isolation %+v: want mode none, not verified, with a reason", h.Isolation)
			}
			var m rpc.MetricsResult
			if err := c.Call(ctx, rpc.MethodMetrics, rpc.MetricsParams{}, &m); err != nil || m.Text == "" {
				t.Fatalf("metrics: %v", err)
			}
			var st rpc.ObjectsStatusResult
			if err := c.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st); err != nil || st.Ledger.Capacity == 0 {
				t.Fatalf("objects.status: %+v %v", st, err)
			}
			p := rpc.MutateParams{InvocationID: "inv-1", JobID: "job-1", DeadlineUnixMs: time.Now().Add(time.Minute).UnixMilli(),
				Dataset:       rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + t.TempDir()}, Path: "d"},
				PinnedVersion: 1, Op: rpc.OpCreate, Index: rpc.IndexSpec{Name: "i", Columns: []string{"id"}, Type: rpc.IndexBTree}}
			var res rpc.MutateResult
			err := c.Call(ctx, rpc.MethodIndexMutate, p, &res)
			var we *rpc.Error
			if !errors.Is(err, rpc.ErrIsolationUnavailable) || !errors.As(err, &we) || we.Code != rpc.CodeIsolationUnavailable {
				t.Fatalf("index.mutate without isolation: want -32003, got %v", err)
			}
			if err := c.Call(ctx, rpc.MethodMetrics, rpc.MetricsParams{}, &m); err != nil {
				t.Fatal(err)
			}
			if v := sample(m.Text, "steward_mutate_workers_in_flight"); v != "0" {
				t.Fatalf("workers in flight %q without isolation", v)
			}
			var sd rpc.ShutdownResult
			if err := c.Call(ctx, rpc.MethodShutdown, rpc.ShutdownParams{Reason: "test"}, &sd); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			stop()
		})
	}
}

// sample returns the value of an unlabeled sample in a Prometheus text exposition ("" if absent).
func sample(text, name string) string {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestResolveRetriesOnceAgainstSilentStore: index.resolve against an S3 endpoint that accepts
// connections and never answers makes exactly two attempts (5 s each, one retry, as PROTOCOL.md
// says) and answers UNKNOWN, a result and not an error.
func TestResolveRetriesOnceAgainstSilentStore(t *testing.T) {
	endpoint, accepted := testbin.SilentEndpoint(t)
	c, _ := serveInProcess(t, sidecar.Config{DisableIsolation: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var res rpc.ResolveResult
	err := c.Call(ctx, rpc.MethodIndexResolve, rpc.ResolveParams{InvocationID: "inv-1", PinnedVersion: 1,
		Dataset:     rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://silent", Endpoint: endpoint}, Path: "d"},
		Credentials: &rpc.Credentials{AccessKey: "k", SecretKey: "s"}}, &res)
	attempts := accepted()
	if err != nil {
		t.Fatalf("resolve against a silent store: want an UNKNOWN result, got error %v", err)
	}
	if res.Outcome != rpc.OutcomeUnknown {
		t.Fatalf("resolve against a silent store: %+v", res)
	}
	if attempts != 2 {
		t.Fatalf("%d attempts against the silent store; PROTOCOL.md promises one retry (2)", attempts)
	}
}
