package ledger_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/ledger"
)

// A real dataset on MinIO (fragments, an index, a fence) with orphans dropped in: only the
// unreferenced, unowned, old-enough ones are deleted.
func TestSweep(t *testing.T) {
	ctx := context.Background()
	s := minioStore(t)
	d, _, err := dataset.Create(ctx, s, "db/t1", dataset.NewGenerator(3000, 1), dataset.WriteOptions{RowsPerFragment: 700, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "by_cat", Columns: []string{"category"}, Type: dataset.Bitmap},
		dataset.MutateOptions{InvocationID: "inv-1", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if _, err := dataset.ResolveSlot(ctx, s, "db/t1", 2, "inv-dead"); err != nil { // writes a fence at 3
		t.Fatal(err)
	}
	idx, _ := dataset.Open(ctx, s, "db/t1", 0)
	uuid := idx.Indices()[0].UUID
	orphans := []string{"db/t1/data/orphan-a.parquet", "db/t1/_indices/" + uuid + "/orphan.seg", "db/t1/stray.tmp"}
	owned := "db/t1/data/in-flight.parquet"
	neighbour := "db/t10/data/other.parquet" // another dataset sharing the name prefix
	upload(t, s, append(slices.Clone(orphans), owned, neighbour))
	before := present(t, s, "db/")

	l := openLedger(t, ledger.Config{Path: t.TempDir() + "/l.db", Stores: stores(map[string]storage.Store{"m": s})}, false)
	if err := l.Reserve(ctx, txn("t9"), "m", []string{owned}); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(2 * time.Hour)
	tests := []struct {
		name     string
		opts     ledger.SweepOptions
		found    int
		young    int
		deletes  bool
		wantKeys []string
	}{
		// The floor: a tiny safety age is raised to MinSafetyAge, and every object is minutes old.
		{name: "floor holds against real mod times", opts: ledger.SweepOptions{SafetyAge: time.Nanosecond}, young: 10},
		{name: "larger age than the clock offset", opts: ledger.SweepOptions{SafetyAge: 3 * time.Hour, Now: future}, young: 10},
		{name: "dry run", opts: ledger.SweepOptions{Now: future, DryRun: true}, found: 3, wantKeys: orphans},
		{name: "sweep", opts: ledger.SweepOptions{Now: future}, found: 3, deletes: true, wantKeys: orphans},
		{name: "second sweep finds nothing", opts: ledger.SweepOptions{Now: future}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			rep, err := l.Sweep(wctx, "m", "db/t1", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(rep.Orphans)
			want := slices.Sorted(slices.Values(tc.wantKeys))
			if rep.Found != tc.found || rep.SkippedYoung != tc.young || !slices.Equal(rep.Orphans, want) {
				t.Fatalf("report %+v", rep)
			}
			if tc.young == 0 && rep.SkippedOwned != 1 {
				t.Fatalf("the ticketed object was not skipped as owned: %+v", rep)
			}
			if tc.deletes && (rep.Deleted != 3 || rep.Pending != 0 || rep.Bytes == 0) {
				t.Fatalf("deletion report %+v", rep)
			}
			if rep.SafetyAge < ledger.MinSafetyAge {
				t.Fatalf("safety age %v below the floor", rep.SafetyAge)
			}
		})
	}
	after := present(t, s, "db/")
	for k := range before {
		if after[k] == slices.Contains(orphans, k) {
			t.Errorf("%s: present before, present after = %v", k, after[k])
		}
	}
	for _, must := range []string{"db/t1/_versions/", "db/t1/data/", "db/t1/_indices/"} {
		if !hasPrefix(after, must) {
			t.Errorf("nothing left under %s", must)
		}
	}
	if err := l.Accept(ctx, txn("t9"), "m", []string{owned}); err != nil {
		t.Fatal(err)
	}
}

func hasPrefix(m map[string]bool, p string) bool {
	for k := range m {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
