package ledger_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/storagetest"
)

// layout is what the sidecar tells the sweep about datasets.
var layout = ledger.DatasetLayout{Folders: dataset.Folders(), Referenced: dataset.Referenced}

// A real dataset on MinIO (fragments, an index, a fence) with orphans dropped in: only the
// unreferenced, unowned, old-enough ones in its data and index folders are deleted.
func TestSweep(t *testing.T) {
	ctx := context.Background()
	s := minioStore(t)
	indexedDataset(t, s, "db/t1", 3000, 700, "category", dataset.Bitmap)
	if _, err := dataset.ResolveSlot(ctx, s, "db/t1", 2, "inv-dead"); err != nil { // writes a fence at 3
		t.Fatal(err)
	}
	idx, _ := dataset.Open(ctx, s, "db/t1", 0)
	uuid := idx.Indices()[0].UUID
	orphans := []string{"db/t1/data/orphan-a.parquet", "db/t1/_indices/" + uuid + "/orphan.seg"}
	owned := "db/t1/data/in-flight.parquet"
	neighbour := "db/t10/data/other.parquet" // another dataset sharing the name prefix
	stray := "db/t1/stray.tmp"               // outside the data and index folders: never touched
	upload(t, s, append(slices.Clone(orphans), owned, neighbour, stray))
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
		// Young counts the unreferenced objects: the two orphans and the owned upload.
		{name: "floor holds against real mod times", opts: ledger.SweepOptions{SafetyAge: time.Nanosecond}, young: 3},
		{name: "larger age than the clock offset", opts: ledger.SweepOptions{SafetyAge: 3 * time.Hour, Now: future}, young: 3},
		{name: "dry run", opts: ledger.SweepOptions{Now: future, DryRun: true}, found: 2, wantKeys: orphans},
		{name: "sweep", opts: ledger.SweepOptions{Now: future}, found: 2, deletes: true, wantKeys: orphans},
		{name: "second sweep finds nothing", opts: ledger.SweepOptions{Now: future}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			tc.opts.Layout = layout
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
			if tc.deletes && (rep.Deleted != 2 || rep.Pending != 0 || rep.Bytes == 0) {
				t.Fatalf("deletion report %+v", rep)
			}
			if rep.SafetyAge < ledger.MinSafetyAge {
				t.Fatalf("safety age %v below the floor", rep.SafetyAge)
			}
			if rep.Referenced+rep.SkippedYoung+rep.SkippedOwned+rep.Deferred+rep.Found != rep.Listed {
				t.Fatalf("report does not account for every listed object: %+v", rep)
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

// indexedDataset creates the dataset at prefix (version 1) and commits an index on column
// (version 2).
func indexedDataset(t *testing.T, s storage.Store, prefix string, rows int64, perFragment int, column string, typ dataset.IndexType) {
	t.Helper()
	ctx := context.Background()
	d, _, err := dataset.Create(ctx, s, prefix, dataset.NewGenerator(rows, 1), dataset.WriteOptions{RowsPerFragment: perFragment, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "ix", Columns: []string{column}, Type: typ},
		dataset.MutateOptions{InvocationID: "inv-1", TempDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
}

// sweepEnv is a local store holding the real dataset "ds" (two fragments, an index), a ledger
// on it, and a clock two hours ahead so that every object is old enough to sweep.
type sweepEnv struct {
	s      *storage.LocalStore
	l      *ledger.Ledger
	future time.Time
}

func newSweepEnv(t *testing.T) *sweepEnv {
	s := storagetest.NewLocal(t)
	indexedDataset(t, s, "ds", 1000, 600, "id", dataset.BTree)
	l := openLedger(t, ledger.Config{Path: t.TempDir() + "/l.db", Stores: stores(map[string]storage.Store{"local": s})}, false)
	return &sweepEnv{s: s, l: l, future: time.Now().Add(2 * time.Hour)}
}

func (e *sweepEnv) sweep(t *testing.T, prefix string, opts ledger.SweepOptions) (ledger.SweepReport, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts.Layout = layout
	if opts.Now.IsZero() {
		opts.Now = e.future
	}
	return e.l.Sweep(ctx, "local", prefix, opts)
}

// A prefix that is no dataset is refused, dry run or not, and nothing in it is deleted: no
// manifest at all, a manifest that does not decode, a manifest over the 64 MiB bound.
func TestSweepRefusesNonDataset(t *testing.T) {
	e := newSweepEnv(t)
	files := []string{"etc/passwd", "etc/data/x.parquet", "etc/_indices/y/btree.seg",
		"bad/" + dataset.VersionKey(1), "bad/data/x.parquet", "huge/" + dataset.VersionKey(1), "huge/data/x.parquet"}
	upload(t, e.s, files)
	must(t, os.Truncate(filepath.Join(e.s.Root(), "huge", dataset.VersionKey(1)), dataset.MaxManifestSize+1))
	before := present(t, e.s, "")
	for _, prefix := range []string{"etc", "bad", "huge", "", "ds/data", "nowhere"} {
		for _, dry := range []bool{true, false} {
			rep, err := e.sweep(t, prefix, ledger.SweepOptions{DryRun: dry})
			if !errors.Is(err, ledger.ErrNotDataset) {
				t.Errorf("sweep %q (dry run %v): %v, want ErrNotDataset", prefix, dry, err)
			}
			if rep.Listed != 0 || rep.Found != 0 {
				t.Errorf("sweep %q (dry run %v) looked at objects: %+v", prefix, dry, rep)
			}
		}
	}
	if after := present(t, e.s, ""); !maps.Equal(before, after) {
		t.Errorf("a refused sweep changed the store: before %d objects, after %d", len(before), len(after))
	}
}

// The sweep never leaves the dataset's data and index folders: old, unreferenced files anywhere
// else under its prefix (or in a neighbour sharing its name prefix) survive; orphans in the
// folders do not.
func TestSweepStaysInDataAndIndexFolders(t *testing.T) {
	e := newSweepEnv(t)
	d, err := dataset.Open(context.Background(), e.s, "ds", 0)
	must(t, err)
	orphans := []string{"ds/data/orphan.parquet", "ds/data/nested/deeper.parquet", "ds/_indices/" + d.Indices()[0].UUID + "/orphan.seg"}
	strays := []string{"ds/stray.tmp", "ds/_versions/junk", "ds/_versions/00000000000000000099.manifest.tmp",
		"ds/other/data/x.parquet", "ds/_indicesX/y.seg", "ds10/data/neighbour.parquet", "top.parquet"}
	upload(t, e.s, append(slices.Clone(orphans), strays...))
	before := present(t, e.s, "")
	rep, err := e.sweep(t, "ds", ledger.SweepOptions{})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(rep.Orphans)
	if want := slices.Sorted(slices.Values(orphans)); !slices.Equal(rep.Orphans, want) || rep.Deleted != len(orphans) {
		t.Fatalf("orphans %v (deleted %d), want %v", rep.Orphans, rep.Deleted, want)
	}
	after := present(t, e.s, "")
	for k := range before {
		if after[k] == slices.Contains(orphans, k) {
			t.Errorf("%s: present after the sweep = %v", k, after[k])
		}
	}
}

// A safety age past what a Duration holds means "never": nothing is old enough, however far
// the clock is moved (317 years used to wrap around to the 10-minute floor).
func TestSweepMaxSafetyAgeDeletesNothing(t *testing.T) {
	e := newSweepEnv(t)
	upload(t, e.s, []string{"ds/data/orphan.parquet"})
	before := present(t, e.s, "")
	rep, err := e.sweep(t, "ds", ledger.SweepOptions{SafetyAge: ledger.MaxSafetyAge, Now: time.Now().AddDate(317, 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Found != 0 || rep.SkippedYoung != 1 || rep.SafetyAge != ledger.MaxSafetyAge {
		t.Fatalf("report %+v", rep)
	}
	if after := present(t, e.s, ""); !maps.Equal(before, after) {
		t.Fatalf("the sweep deleted something")
	}
}

// A layout the sweep cannot trust is refused before anything is read.
func TestSweepNeedsALayout(t *testing.T) {
	e := newSweepEnv(t)
	for _, lay := range []ledger.DatasetLayout{
		{},
		{Folders: dataset.Folders()},
		{Referenced: dataset.Referenced},
		{Folders: []string{"data"}, Referenced: dataset.Referenced},
		{Folders: []string{"../data/"}, Referenced: dataset.Referenced},
		{Folders: []string{"data/", "data/x/"}, Referenced: dataset.Referenced},
	} {
		_, err := e.l.Sweep(context.Background(), "local", "ds", ledger.SweepOptions{Layout: lay, Now: e.future})
		if !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("layout %+v: %v, want ErrInvalid", lay.Folders, err)
		}
	}
}

func must(t *testing.T, errs ...error) {
	t.Helper()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
