package sidecar_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// TestSweepSeesTicketsOfEverySpelling: a host reserves an object under one spelling of the store
// URL (trailing slash) and sweeps under another. The ledger names both spellings alike, so the
// sweep sees the ticket and keeps the object, and still deletes a real orphan next to it. (Before
// one canonical name, the spellings were two stores and the sweep deleted the held object.)
func TestSweepSeesTicketsOfEverySpelling(t *testing.T) {
	e := newSidecar(t, "--state-dir", t.TempDir())
	ctx := context.Background()
	e.makeDataset("ds", 1000)
	old := time.Now().Add(-3 * time.Hour)
	held, orphan := "ds/data/held-by-txn.bin", "ds/data/orphan.bin"
	for _, k := range []string{held, orphan} {
		if err := e.store.Put(ctx, k, strings.NewReader("payload"), 7); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(e.root, k), old, old); err != nil {
			t.Fatal(err)
		}
	}
	owner := rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: randID("txn-")}
	slashed := rpc.StoreSpec{URL: "file://" + e.root + "/"}
	var rr rpc.ObjectsReserveResult
	if err := e.c.Call(ctx, rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: owner, Store: slashed, Keys: []string{held}}, &rr); err != nil {
		t.Fatal(err)
	}
	var res rpc.ObjectsSweepResult
	err := e.c.Call(ctx, rpc.MethodObjectsSweep, rpc.ObjectsSweepParams{
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: "ds"}}, &res)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Stat(ctx, held); err != nil {
		t.Fatalf("the sweep deleted an object the ledger held under another spelling of the store: %v (report %+v)", err, res)
	}
	if res.SkippedOwned != 1 || res.Found != 1 || res.Deleted != 1 {
		t.Fatalf("sweep report %+v: want the held object skipped as owned and the orphan deleted", res)
	}
	if _, err := e.store.Stat(ctx, orphan); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the orphan survived the sweep: %v", err)
	}
	var st rpc.ObjectsStatusResult
	if err := e.c.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{Owner: &owner, Tickets: true}, &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Tickets) != 1 || st.Tickets[0].Store != "file://"+e.root {
		t.Fatalf("tickets %+v: want one, named by the canonical URL %q", st.Tickets, "file://"+e.root)
	}
	var ost rpc.ObjectsOwnerStatus
	if err := e.c.Call(ctx, rpc.MethodObjectsAccept, rpc.ObjectsReleaseParams{Owner: owner, All: true}, &ost); err != nil || ost.Held != 0 {
		t.Fatalf("accept: %+v %v", ost, err)
	}
	err = e.c.Call(ctx, rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: owner,
		Store: rpc.StoreSpec{URL: "s3://u@bucket/x", Endpoint: "127.0.0.1:9000"}, Keys: []string{"k"}}, &rr)
	if !errors.Is(err, rpc.ErrInvalidParams) {
		t.Fatalf("reserve in a store URL with userinfo: want ErrInvalidParams, got %v", err)
	}
}

// TestMutateInEscapedFileURL: a percent-escaped file URL reaches the worker decoded exactly once,
// so the worker opens the directory the host named. (Before, validation decoded "%20" and the
// worker did not: it opened an empty "my%20data" and found no dataset.)
func TestMutateInEscapedFileURL(t *testing.T) {
	e := newSidecar(t)
	ctx := context.Background()
	dir := filepath.Join(testenv.GuestDir(t), "my data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.GuestOwn(t, dir)
	st, err := storage.OpenStore(ctx, storage.StoreConfig{Kind: storage.KindLocal, Root: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dataset.Create(ctx, st, "ds", dataset.NewGenerator(500, 7), dataset.WriteOptions{RowsPerFragment: 500}); err != nil {
		t.Fatal(err)
	}
	p := e.params(randID("inv-"), "ds", 1, rpc.OpCreate, "ix", "category", rpc.IndexBitmap)
	p.Dataset.Store = rpc.StoreSpec{URL: "file://" + strings.ReplaceAll(dir, " ", "%20") + "/"}
	res := e.mutate(p)
	expect(t, res, rpc.PhaseNativeReturn, rpc.NativeOK)
	if v, err := dataset.LatestVersion(ctx, st, "ds"); err != nil || v != 2 {
		t.Fatalf("latest version in %q: %d, %v; want the commit at 2", dir, v, err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "my%20data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the worker created the undecoded directory: %v", err)
	}
}
