package dispatch

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/hashicorp/go-hclog"
)

// counted is a real sidecar whose sends are counted: the proof that nothing is sent twice.
type counted struct {
	*host.Client
	sends atomic.Int64
}

func (c *counted) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	c.sends.Add(1)
	return c.Client.Mutate(ctx, p)
}

func randID(prefix string) string { return testbin.RandID(prefix) }

// launchSidecar starts a real `steward serve` (internal/testing/testsidecar: test faults, short kill
// ladder, a private cgroup parent checked for leftovers at cleanup).
func launchSidecar(t *testing.T) *counted {
	t.Helper()
	return &counted{Client: testsidecar.Start(t, testsidecar.Options{}).Client}
}

// startSidecar launches a sidecar outside a test (the restart helper process) with the same flags,
// and extra ones.
func startSidecar(bin, parent string, log hclog.Logger, extra ...string) (*host.Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return host.LaunchStdio(ctx, host.Config{Path: bin, Args: append(testsidecar.FastArgs(parent), extra...), Logger: log, KillGrace: 2 * time.Second})
}

// realData is a local directory store with datasets made through the storage API.
type realData struct {
	t     *testing.T
	root  string
	store storage.Store
}

func newRealData(t *testing.T) *realData {
	t.Helper()
	root := testenv.GuestDir(t) // a contained worker's guest must reach and write it
	s, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindLocal, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	return &realData{t: t, root: root, store: s}
}

// make creates dataset path at version 1, then appends to reach version.
func (r *realData) make(path string, version int64) rpc.DatasetRef {
	r.t.Helper()
	ctx := context.Background()
	ds, _, err := dataset.Create(ctx, r.store, path, dataset.NewGenerator(2000, 7), dataset.WriteOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	for ds.Version() < version {
		if ds, _, err = ds.Append(ctx, dataset.NewGenerator(100, uint64(ds.Version())), dataset.WriteOptions{}); err != nil {
			r.t.Fatal(err)
		}
	}
	return r.ref(path)
}

func (r *realData) ref(path string) rpc.DatasetRef {
	return rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + r.root}, Path: path}
}

func (r *realData) latest(path string) int64 {
	r.t.Helper()
	v, err := dataset.LatestVersion(context.Background(), r.store, path)
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// indices lists the index names of the latest version of path.
func (r *realData) indices(path string) []string {
	r.t.Helper()
	ds, err := dataset.Open(context.Background(), r.store, path, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	var names []string
	for _, ix := range ds.Indices() {
		names = append(names, ix.Name)
	}
	return names
}

func createReq(ref rpc.DatasetRef, version int64, name, column string) Request {
	return Request{Dataset: ref, AdmittedVersion: version, Op: rpc.OpCreate,
		Index: rpc.IndexSpec{Name: name, Columns: []string{column}, Type: rpc.IndexBTree}}
}

func historyEvents(j Job) string { return strings.Join(splitEvents(j), " ") }
