package sidecar_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	// Four objects in the data and index folders: two fragments and one index segment (all
	// referenced) and the orphan, younger than the floor, so not even a candidate.
	if res.Listed != 4 || res.Referenced != 3 || res.Found != 0 || res.Deleted != 0 || res.SkippedYoung != 1 {
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

// sweepCall sends objects.sweep for path in the sidecar's local store.
func (e *sidecarEnv) sweepCall(path string, ageMs int64, dry bool) (rpc.ObjectsSweepResult, error) {
	var res rpc.ObjectsSweepResult
	err := e.c.Call(context.Background(), rpc.MethodObjectsSweep, rpc.ObjectsSweepParams{
		Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: path}, SafetyAgeMs: ageMs, DryRun: dry}, &res)
	return res, err
}

// plantOld writes key into the sidecar's store and makes it two hours old: old enough for any
// sweep with the default safety age.
func (e *sidecarEnv) plantOld(t *testing.T, key string) {
	t.Helper()
	if err := e.store.Put(context.Background(), key, strings.NewReader("planted"), 7); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(e.root, filepath.FromSlash(key)), old, old); err != nil {
		t.Fatal(err)
	}
}

// objects.sweep of a prefix that is no dataset (here a copy of an /etc-like tree, old files in
// data/ and _indices/ folders included) is refused with -32602, dry run or not, and deletes
// nothing.
func TestObjectsSweepRefusesNonDatasetOverRPC(t *testing.T) {
	e := newSidecar(t, "--state-dir", t.TempDir())
	files := []string{"etc/passwd", "etc/ssh/sshd_config", "etc/data/x.parquet", "etc/_indices/u/btree.seg"}
	for _, k := range files {
		e.plantOld(t, k)
	}
	for _, dry := range []bool{true, false} {
		res, err := e.sweepCall("etc", 0, dry)
		if !errors.Is(err, rpc.ErrInvalidParams) {
			t.Fatalf("sweep of etc (dry run %v): %v %+v, want ErrInvalidParams", dry, err, res)
		}
	}
	for _, k := range files {
		if _, err := e.store.Stat(context.Background(), k); err != nil {
			t.Errorf("%s is gone after a refused sweep: %v", k, err)
		}
	}
}

// A safety age of 317 years deletes nothing, not even a two-hour-old orphan: it saturates to
// "never" instead of wrapping around to the 10-minute floor.
func TestObjectsSweepHugeSafetyAgeOverRPC(t *testing.T) {
	e := newSidecar(t, "--state-dir", t.TempDir())
	e.makeDataset("aged", 2000)
	orphan := "aged/data/left-by-a-crash.parquet"
	e.plantOld(t, orphan)
	const years317 = 317 * 365 * 24 * 3600 * 1000
	res, err := e.sweepCall("aged", years317, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Found != 0 || res.Deleted != 0 || res.SafetyAgeMs != rpc.MaxSafetyAgeMs {
		t.Fatalf("sweep with a 317-year safety age: %+v", res)
	}
	if _, err := e.store.Stat(context.Background(), orphan); err != nil {
		t.Fatalf("the orphan was deleted: %v", err)
	}
	// The default age does sweep it: the orphan was a real candidate.
	if res, err = e.sweepCall("aged", 0, false); err != nil || res.Deleted != 1 {
		t.Fatalf("sweep with the default age: %+v, %v", res, err)
	}
}
