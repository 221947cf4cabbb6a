package sidecar_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// TestObjectsSweepOverRPC runs objects.sweep on a real dataset holding a fresh unreferenced
// object: the safety floor (10 min) keeps it, however small the age the host asks for, and the
// report accounts for every object. (Deleting old orphans is proven in storage/ledger with a clock
// moved forward; here the wire and the floor are.)
func TestObjectsSweepOverRPC(t *testing.T) {
	e := newSidecar(t, "--state-dir", t.TempDir())
	ctx := context.Background()
	e.makeDataset("swept", 2000)
	expect(t, e.mutate(e.params(randID("inv-"), "swept", 1, rpc.OpCreate, "ix", "category", rpc.IndexBitmap)), rpc.PhaseNativeReturn, rpc.NativeOK)
	orphan := "swept/_indices/00000000-dead-beef-0000-000000000000/bitmap.seg"
	if err := e.store.Put(ctx, orphan, strings.NewReader("left by a crashed writer"), 24); err != nil {
		t.Fatal(err)
	}
	var res rpc.ObjectsSweepResult
	err := e.c.Call(ctx, rpc.MethodObjectsSweep, rpc.ObjectsSweepParams{
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: "swept"}, SafetyAgeMs: 1}, &res)
	if err != nil {
		t.Fatal(err)
	}
	if res.SafetyAgeMs < 10*60*1000 {
		t.Fatalf("a 1 ms safety age was applied as %d ms: the floor was configured away", res.SafetyAgeMs)
	}
	// Six objects: two manifests (always referenced), two fragments, one index segment and the
	// orphan, all younger than the floor, so none is even a candidate.
	if res.Listed != 6 || res.Found != 0 || res.Deleted != 0 || res.SkippedYoung != 4 {
		t.Fatalf("sweep report %+v: want the young objects skipped", res)
	}
	if res.Referenced+res.SkippedYoung+res.SkippedOwned+res.Found != res.Listed {
		t.Fatalf("sweep report does not account for every object: %+v", res)
	}
	if _, err := e.store.Stat(ctx, orphan); err != nil {
		t.Fatalf("the young object was deleted: %v", err)
	}
	var bad rpc.ObjectsSweepResult
	err = e.c.Call(ctx, rpc.MethodObjectsSweep, rpc.ObjectsSweepParams{
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: "../etc"}}, &bad)
	if !errors.Is(err, rpc.ErrInvalidParams) {
		t.Fatalf("path escaping the store: want ErrInvalidParams, got %v", err)
	}
}
