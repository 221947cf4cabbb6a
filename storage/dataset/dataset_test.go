package dataset_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/storagetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	removeScratch()
	testminio.Cleanup()
	os.Exit(code)
}

// eachStore runs fn on a fresh local store and a fresh bucket of the shared MinIO.
func eachStore(t *testing.T, fn func(t *testing.T, s storage.Store)) {
	t.Run("local", func(t *testing.T) { fn(t, storagetest.NewLocal(t)) })
	t.Run("minio", func(t *testing.T) {
		srv := testminio.Shared(t)
		fn(t, storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey))
	})
}

func create(t *testing.T, s storage.Store, prefix string, rows int64, seed uint64) *dataset.Dataset {
	t.Helper()
	d, _, err := dataset.Create(context.Background(), s, prefix, dataset.NewGenerator(rows, seed),
		dataset.WriteOptions{RowsPerFragment: 700, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func mutate(t *testing.T, d *dataset.Dataset, spec dataset.MutateSpec, inv string) dataset.MutateResult {
	t.Helper()
	res, err := d.Mutate(context.Background(), spec, dataset.MutateOptions{InvocationID: inv, TempDir: t.TempDir(), RunEntries: 500})
	if err != nil {
		t.Fatalf("mutate %+v: %v", spec, err)
	}
	return res
}

func TestCreateOpenVersions(t *testing.T) {
	eachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		d := create(t, s, "db/t1", 2000, 1)
		if d.Version() != 1 || d.Rows() != 2000 || len(d.Manifest().Fragments) != 3 {
			t.Fatalf("created v%d rows %d frags %d", d.Version(), d.Rows(), len(d.Manifest().Fragments))
		}
		if _, _, err := dataset.Create(ctx, s, "db/t1", dataset.NewGenerator(10, 1), dataset.WriteOptions{}); !errors.Is(err, dataset.ErrDatasetExists) {
			t.Fatalf("second create: %v", err)
		}
		d2, res, err := d.Append(ctx, dataset.NewGenerator(100, 2), dataset.WriteOptions{InvocationID: "app-1"})
		if err != nil || d2.Version() != 2 || d2.Rows() != 2100 || len(res.Created) != 1 {
			t.Fatalf("append: v%d rows %d created %v: %v", d2.Version(), d2.Rows(), res.Created, err)
		}
		latest, err := dataset.Open(ctx, s, "db/t1", 0)
		if err != nil || latest.Version() != 2 {
			t.Fatalf("open latest: %v", err)
		}
		pinned, err := dataset.Open(ctx, s, "db/t1", 1)
		if err != nil || pinned.Rows() != 2000 {
			t.Fatalf("open pinned: %v", err)
		}
		vs, err := dataset.Versions(ctx, s, "db/t1")
		if err != nil || len(vs) != 2 || vs[1].Op != dataset.OpAppend || vs[1].InvocationID != "app-1" {
			t.Fatalf("versions = %+v, %v", vs, err)
		}
		if _, err := dataset.Open(ctx, s, "db/none", 0); !errors.Is(err, dataset.ErrDatasetNotFound) || dataset.NativeCode(err) != dataset.CodeNotFound {
			t.Fatalf("open missing: %v", err)
		}
		if _, err := dataset.Open(ctx, s, "db/t1", 9); !errors.Is(err, dataset.ErrVersionNotFound) {
			t.Fatalf("open missing version: %v", err)
		}
	})
}

// TestIndexMatchesScan is the property test: random indexes on every column type, random
// equality, range and IN queries, index answers compared with full scans, including rows
// appended after the index was built.
func TestIndexMatchesScan(t *testing.T) {
	eachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		d := create(t, s, "prop", 3000, 42)
		specs := []dataset.MutateSpec{
			{Op: dataset.MutateCreate, Name: "by_id", Columns: []string{"id"}, Type: dataset.BTree, Params: map[string]string{"page_entries": "64"}},
			{Op: dataset.MutateCreate, Name: "by_price", Columns: []string{"price"}, Type: dataset.BTree},
			{Op: dataset.MutateCreate, Name: "by_name", Columns: []string{"name"}, Type: dataset.BTree, Params: map[string]string{"page_entries": "100"}},
			{Op: dataset.MutateCreate, Name: "by_cat", Columns: []string{"category"}, Type: dataset.Bitmap},
		}
		for _, spec := range specs {
			nd, err := dataset.Open(ctx, s, "prop", 0)
			if err != nil {
				t.Fatal(err)
			}
			res := mutate(t, nd, spec, "inv-"+spec.Name)
			if len(res.Created) != 1 || res.Version != nd.Version()+1 {
				t.Fatalf("%s: %+v", spec.Name, res)
			}
		}
		d, err := dataset.Open(ctx, s, "prop", 0)
		if err != nil {
			t.Fatal(err)
		}
		d, _, err = d.Append(ctx, dataset.NewGenerator(500, 43), dataset.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Sample values present in the data for equality and IN.
		all, _ := d.Scan(ctx, dataset.Between("id", nil, nil))
		if len(all.RowIDs) != 3500 {
			t.Fatalf("scan all = %d rows", len(all.RowIDs))
		}
		r := rand.New(rand.NewPCG(9, 9))
		names := sampleStrings(t, d, "name", 50)
		for q := range 60 {
			var p dataset.Predicate
			switch q % 6 {
			case 0:
				p = dataset.Eq("id", int64(r.IntN(3600)))
			case 1:
				lo := r.IntN(3500)
				p = dataset.Between("id", lo, lo+r.IntN(300))
			case 2:
				lo := r.Float64() * 10000
				p = dataset.Predicate{Column: "price", Op: dataset.OpRange, Lo: lo, Hi: lo + r.Float64()*500, LoInclusive: r.IntN(2) == 0}
			case 3:
				p = dataset.In("category", fmt.Sprintf("cat-%02d", r.IntN(20)), fmt.Sprintf("cat-%02d", r.IntN(20)))
			case 4:
				p = dataset.Eq("name", names[r.IntN(len(names))])
			case 5:
				p = dataset.Between("name", names[r.IntN(len(names))], nil)
			}
			indexMatchesScan(t, d, p)
		}
	})
}

// indexMatchesScan checks that p is answered through an index, with the rows a full scan finds.
func indexMatchesScan(t *testing.T, d *dataset.Dataset, p dataset.Predicate) {
	t.Helper()
	ctx := context.Background()
	idx, err := d.Query(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	scan, err := d.Scan(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if idx.Index == "" {
		t.Fatalf("%#v used no index", p)
	}
	if !slices.Equal(idx.RowIDs, scan.RowIDs) {
		t.Fatalf("%#v: index %d rows, scan %d rows", p, len(idx.RowIDs), len(scan.RowIDs))
	}
}

// sampleStrings returns n values of the generator's name column (seed 42, as in create).
func sampleStrings(t *testing.T, d *dataset.Dataset, col string, n int) []string {
	t.Helper()
	var out []string
	g := dataset.NewGenerator(d.Rows(), 42)
	for len(out) < n {
		b, err := g.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < b.Rows && len(out) < n; i += 37 {
			out = append(out, b.Columns[3].String[i])
		}
	}
	return out
}

func TestMutateSemantics(t *testing.T) {
	ctx := context.Background()
	s := storagetest.NewLocal(t)
	d := create(t, s, "sem", 1000, 5)
	d1 := mutate(t, d, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "Idx_Price", Columns: []string{"price"}, Type: "btree"}, "a")
	v2, _ := dataset.Open(ctx, s, "sem", 0)
	if v2.Version() != d1.Version || v2.Indices()[0].Name != "Idx_Price" || v2.Indices()[0].Type != dataset.BTree {
		t.Fatalf("index stored as %+v", v2.Indices())
	}
	for _, tc := range []struct {
		name     string
		spec     dataset.MutateSpec
		wantErr  error
		wantCode int
		wantNoOp bool
	}{
		{"create existing (case-folded)", dataset.MutateSpec{Op: dataset.MutateCreate, Name: "idx_price", Columns: []string{"id"}, Type: dataset.BTree}, dataset.ErrIndexExists, dataset.CodeAlreadyExists, false},
		{"create if not exists", dataset.MutateSpec{Op: dataset.MutateCreate, Name: "IDX_PRICE", Columns: []string{"id"}, Type: dataset.BTree, IfNotExists: true}, nil, 0, true},
		{"drop missing", dataset.MutateSpec{Op: dataset.MutateDrop, Name: "nope"}, dataset.ErrIndexNotFound, dataset.CodeNotFound, false},
		{"drop missing if exists", dataset.MutateSpec{Op: dataset.MutateDrop, Name: "nope", IfExists: true}, nil, 0, true},
		{"unknown column", dataset.MutateSpec{Op: dataset.MutateCreate, Name: "x", Columns: []string{"zzz"}, Type: dataset.BTree}, dataset.ErrSchemaMismatch, dataset.CodeInvalidArgument, false},
		{"two columns", dataset.MutateSpec{Op: dataset.MutateCreate, Name: "x", Columns: []string{"id", "price"}, Type: dataset.BTree}, dataset.ErrNotSupported, dataset.CodeNotSupported, false},
		{"bad type", dataset.MutateSpec{Op: dataset.MutateCreate, Name: "x", Columns: []string{"id"}, Type: "HASH"}, dataset.ErrInvalidArgument, dataset.CodeInvalidArgument, false},
		{"bad param", dataset.MutateSpec{Op: dataset.MutateCreate, Name: "x", Columns: []string{"id"}, Type: dataset.BTree, Params: map[string]string{"fanout": "3"}}, dataset.ErrInvalidArgument, dataset.CodeInvalidArgument, false},
		{"empty name", dataset.MutateSpec{Op: dataset.MutateCreate, Columns: []string{"id"}, Type: dataset.BTree}, dataset.ErrInvalidArgument, dataset.CodeInvalidArgument, false},
		{"bitmap too many keys", dataset.MutateSpec{Op: dataset.MutateCreate, Name: "bm", Columns: []string{"id"}, Type: dataset.Bitmap, Params: map[string]string{"max_keys": "10"}}, dataset.ErrIndexBuild, dataset.CodeIndex, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := v2.Mutate(ctx, tc.spec, dataset.MutateOptions{TempDir: t.TempDir()})
			if !errors.Is(err, tc.wantErr) && !(tc.wantErr == nil && err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if got := dataset.NativeCode(err); got != tc.wantCode {
				t.Fatalf("code = %d, want %d (%v)", got, tc.wantCode, err)
			}
			if res.NoOp != tc.wantNoOp || (tc.wantNoOp && res.Version != v2.Version()) {
				t.Fatalf("result %+v", res)
			}
		})
	}
	// REPLACE keeps one index under the new spelling; DROP by another case removes it.
	v2b, _ := dataset.Open(ctx, s, "sem", 0)
	r := mutate(t, v2b, dataset.MutateSpec{Op: dataset.MutateReplace, Name: "IDX_price", Columns: []string{"price"}, Type: dataset.Bitmap}, "b")
	v3, _ := dataset.Open(ctx, s, "sem", r.Version)
	if ix := v3.Indices(); len(ix) != 1 || ix[0].Name != "IDX_price" || ix[0].Type != dataset.Bitmap {
		t.Fatalf("after replace: %+v", ix)
	}
	r = mutate(t, v3, dataset.MutateSpec{Op: dataset.MutateDrop, Name: "idx_PRICE"}, "c")
	v4, _ := dataset.Open(ctx, s, "sem", r.Version)
	if len(v4.Indices()) != 0 || r.IndexName != "IDX_price" {
		t.Fatalf("after drop: %+v %+v", v4.Indices(), r)
	}
	vs, _ := dataset.Versions(ctx, s, "sem")
	if ops := []string{vs[1].Op, vs[2].Op, vs[3].Op}; !slices.Equal(ops, []string{dataset.OpCreateIndex, dataset.OpReplaceIndex, dataset.OpDropIndex}) {
		t.Fatalf("ops = %v", ops)
	}
}

func TestAmbiguousName(t *testing.T) {
	ctx := context.Background()
	s := storagetest.NewLocal(t)
	d := create(t, s, "amb", 100, 1)
	r := mutate(t, d, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "Ix", Columns: []string{"id"}, Type: dataset.BTree}, "a")
	// Another engine wrote a second spelling of the same name: craft it as the next version.
	d2, _ := dataset.Open(ctx, s, "amb", r.Version)
	m := d2.Manifest()
	dup := m.Indices[0]
	dup.Name, dup.UUID = "IX", "00000000-0000-4000-8000-000000000001"
	dup.Files = []dataset.IndexFile{{Path: "_indices/" + dup.UUID + "/btree.seg", Size: 1}}
	m.Indices = append(m.Indices, dup)
	m.Version++
	b, err := dataset.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "amb/"+dataset.VersionKey(m.Version), bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatal(err)
	}
	d3, err := dataset.Open(ctx, s, "amb", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = d3.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateDrop, Name: "ix"}, dataset.MutateOptions{})
	var ae *dataset.AmbiguousNameError
	if !errors.As(err, &ae) || len(ae.Matches) != 2 || dataset.NativeCode(err) != dataset.CodeInvalidArgument {
		t.Fatalf("err = %v", err)
	}
	if _, err := d3.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateDrop, Name: "Ix"}, dataset.MutateOptions{}); !errors.Is(err, dataset.ErrAmbiguousName) {
		t.Fatalf("exact spelling is still ambiguous under case folding: %v", err)
	}
}

func TestCommitConflict(t *testing.T) {
	eachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		d := create(t, s, "cc", 500, 3)
		const writers = 8
		var wg sync.WaitGroup
		errs := make([]error, writers)
		results := make([]dataset.MutateResult, writers)
		for w := range writers {
			wg.Go(func() {
				results[w], errs[w] = d.Mutate(ctx, dataset.MutateSpec{
					Op: dataset.MutateCreate, Name: fmt.Sprintf("ix%d", w), Columns: []string{"id"}, Type: dataset.BTree,
				}, dataset.MutateOptions{InvocationID: fmt.Sprintf("w%d", w), TempDir: t.TempDir()})
			})
		}
		wg.Wait()
		wins := 0
		for w, err := range errs {
			var cc *dataset.CommitConflictError
			switch {
			case err == nil:
				wins++
			case errors.As(err, &cc):
				if cc.Attempted != 2 || cc.Latest < 2 || dataset.NativeCode(err) != dataset.CodeCommitConflict {
					t.Errorf("writer %d: %+v", w, cc)
				}
				if len(results[w].Created) != 1 {
					t.Errorf("loser %d must report its uploaded segment: %+v", w, results[w])
				}
			default:
				t.Errorf("writer %d: %v", w, err)
			}
		}
		if wins != 1 {
			t.Fatalf("%d winners", wins)
		}
	})
}

func TestCustodyHook(t *testing.T) {
	ctx := context.Background()
	s := storagetest.NewLocal(t)
	d := create(t, s, "cust/ds", 800, 1)
	var seen []string
	hook := func(_ context.Context, key string) error {
		if _, err := s.Stat(ctx, key); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("hook for %s called after the object exists: %v", key, err)
		}
		seen = append(seen, key)
		return nil
	}
	res, err := d.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "b", Columns: []string{"category"}, Type: dataset.Bitmap},
		dataset.MutateOptions{InvocationID: "inv", BeforeUpload: hook, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(seen, res.Created) || len(seen) != 1 || !strings.HasPrefix(seen[0], "cust/ds/_indices/"+res.IndexUUID+"/") {
		t.Fatalf("hook saw %v, result %+v", seen, res)
	}
	if _, err := s.Stat(ctx, seen[0]); err != nil {
		t.Fatalf("reported object missing: %v", err)
	}
	if res.Manifest != "cust/ds/"+dataset.VersionKey(2) {
		t.Fatalf("manifest key %q", res.Manifest)
	}
	// A refusing hook: nothing is uploaded and nothing committed.
	refuse := errors.New("ledger full")
	d2, _ := dataset.Open(ctx, s, "cust/ds", 0)
	res, err = d2.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "c", Columns: []string{"id"}, Type: dataset.BTree},
		dataset.MutateOptions{BeforeUpload: func(context.Context, string) error { return refuse }, TempDir: t.TempDir()})
	if !errors.Is(err, dataset.ErrUploadRefused) || !errors.Is(err, refuse) || len(res.Created) != 0 {
		t.Fatalf("refused: %+v, %v", res, err)
	}
	infos, _ := storage.ListAll(ctx, s, "cust/ds/_indices/")
	if len(infos) != 1 {
		t.Fatalf("objects after refusal: %v", infos)
	}
	if v, _ := dataset.LatestVersion(ctx, s, "cust/ds"); v != 2 {
		t.Fatalf("latest = %d", v)
	}
	// Fragment uploads go through the hook too.
	var frags []string
	_, wr, err := d2.Append(ctx, dataset.NewGenerator(10, 1), dataset.WriteOptions{BeforeUpload: func(_ context.Context, k string) error {
		frags = append(frags, k)
		return nil
	}})
	if err != nil || !slices.Equal(frags, wr.Created) || len(frags) != 1 || !strings.HasPrefix(frags[0], "cust/ds/data/") {
		t.Fatalf("append hook %v result %v: %v", frags, wr.Created, err)
	}
}

func TestResolveSlot(t *testing.T) {
	eachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		d := create(t, s, "rs", 300, 1)
		spec := dataset.MutateSpec{Op: dataset.MutateCreate, Name: "i", Columns: []string{"id"}, Type: dataset.BTree}

		// X committed at 2: COMMITTED; anyone else asking about slot 2: NOT_COMMITTED.
		mutate(t, d, spec, "X")
		out, err := dataset.ResolveSlot(ctx, s, "rs", 1, "X")
		if err != nil || !out.Committed || out.FenceWritten || out.Version != 2 {
			t.Fatalf("X: %+v, %v", out, err)
		}
		out, err = dataset.ResolveSlot(ctx, s, "rs", 1, "Y")
		if err != nil || out.Committed || out.Holder != "X" {
			t.Fatalf("Y: %+v, %v", out, err)
		}

		// Z pinned at 2 never committed: the fence takes slot 3, and Z can no longer commit.
		out, err = dataset.ResolveSlot(ctx, s, "rs", 2, "Z")
		if err != nil || out.Committed || !out.FenceWritten || out.Version != 3 {
			t.Fatalf("Z: %+v, %v", out, err)
		}
		v2, _ := dataset.Open(ctx, s, "rs", 2)
		_, err = v2.Mutate(ctx, dataset.MutateSpec{Op: dataset.MutateCreate, Name: "late", Columns: []string{"price"}, Type: dataset.BTree},
			dataset.MutateOptions{InvocationID: "Z", TempDir: t.TempDir()})
		if !errors.Is(err, dataset.ErrCommitConflict) {
			t.Fatalf("Z after fence: %v", err)
		}
		// Resolving again is stable, and readers see the fence as a no-op version.
		out, err = dataset.ResolveSlot(ctx, s, "rs", 2, "Z")
		if err != nil || out.Committed || out.FenceWritten || out.Op != dataset.OpFence {
			t.Fatalf("Z again: %+v, %v", out, err)
		}
		latest, err := dataset.Open(ctx, s, "rs", 0)
		if err != nil || latest.Version() != 3 || !latest.Manifest().IsFence() || len(latest.Indices()) != 1 || latest.Rows() != 300 {
			t.Fatalf("fence version: %v", err)
		}
		q, err := latest.Query(ctx, dataset.Eq("id", 7))
		if err != nil || !slices.Equal(q.RowIDs, []uint64{7}) || q.Index != "i" {
			t.Fatalf("query on fence version: %+v, %v", q, err)
		}
		if _, err := dataset.ResolveSlot(ctx, s, "rs", 0, "Z"); !errors.Is(err, dataset.ErrInvalidArgument) {
			t.Fatalf("pinned 0: %v", err)
		}
	})
}

func TestResolveSlotUnavailable(t *testing.T) {
	srv := testminio.Dedicated(t)
	s := storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	create(t, s, "ds", 100, 1)
	srv.Stop()
	_, err := dataset.ResolveSlot(context.Background(), s, "ds", 1, "X")
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := dataset.ResolveSlot(context.Background(), s, "ds", 1, "X")
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, storage.ErrUnavailable) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // a restarted MinIO answers 503 while it initializes
		out, err = dataset.ResolveSlot(context.Background(), s, "ds", 1, "X")
	}
	if err != nil || !out.FenceWritten {
		t.Fatalf("after restart: %+v, %v", out, err)
	}
}

func TestCSVImport(t *testing.T) {
	ctx := context.Background()
	csv := "id,label,score:float64,qty\n1,a,2,10\n2,b,3.5,-4\n3,a,1e3,7\n"
	src, err := dataset.NewCSVSource(strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]dataset.FieldType{"id": dataset.Int64, "label": dataset.String, "score": dataset.Float64, "qty": dataset.Int64}
	if err := src.Schema().CheckSchema(want); err != nil {
		t.Fatal(err)
	}
	s := storagetest.NewLocal(t)
	d, _, err := dataset.Create(ctx, s, "csv", src, dataset.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.Scan(ctx, dataset.Eq("label", "a"))
	if err != nil || !slices.Equal(q.RowIDs, []uint64{0, 2}) {
		t.Fatalf("scan: %+v, %v", q, err)
	}
	q, _ = d.Scan(ctx, dataset.Between("score", 3, nil))
	if !slices.Equal(q.RowIDs, []uint64{1, 2}) {
		t.Fatalf("score >= 3: %v", q.RowIDs)
	}
	for name, bad := range map[string]string{
		"bad int later":  "n\n" + strings.Repeat("1\n", 1001) + "x\n",
		"ragged":         "a,b\n1,2\n3\n",
		"bad type":       "a:uint8\n1\n",
		"duplicate name": "a,a\n1,2\n",
	} {
		t.Run(name, func(t *testing.T) {
			src, err := dataset.NewCSVSource(strings.NewReader(bad))
			if err == nil {
				_, _, err = dataset.Create(ctx, storagetest.NewLocal(t), "x", src, dataset.WriteOptions{})
			}
			if !errors.Is(err, dataset.ErrInvalidArgument) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestSchemaContract(t *testing.T) {
	d := create(t, storagetest.NewLocal(t), "sc", 10, 1)
	for _, tc := range []struct {
		name     string
		contract map[string]dataset.FieldType
		ok       bool
	}{
		{"matches", map[string]dataset.FieldType{"id": dataset.Int64, "price": dataset.Float64}, true},
		{"wrong type", map[string]dataset.FieldType{"price": dataset.String}, false},
		{"missing", map[string]dataset.FieldType{"nope": dataset.Int64}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := d.CheckSchema(tc.contract)
			var se *dataset.SchemaError
			if tc.ok != (err == nil) || (!tc.ok && (!errors.As(err, &se) || dataset.NativeCode(err) != dataset.CodeInvalidArgument)) {
				t.Fatalf("err = %v", err)
			}
		})
	}
	if _, err := d.Scan(context.Background(), dataset.Eq("price", "cheap")); !errors.Is(err, dataset.ErrSchemaMismatch) {
		t.Fatalf("typed query mismatch: %v", err)
	}
}

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "steward-dataset-example-")
	defer os.RemoveAll(dir)
	store, _ := storage.NewLocalStore(dir)

	d, _, _ := dataset.Create(ctx, store, "sales", dataset.NewGenerator(10_000, 1), dataset.WriteOptions{})
	res, _ := d.Mutate(ctx, dataset.MutateSpec{
		Op: dataset.MutateCreate, Name: "by_category", Columns: []string{"category"}, Type: dataset.Bitmap,
	}, dataset.MutateOptions{InvocationID: "inv-1"})
	fmt.Println("committed version", res.Version)

	d, _ = dataset.Open(ctx, store, "sales", 0)
	q, _ := d.Query(ctx, dataset.Eq("id", 1234))
	fmt.Println(q.RowIDs, "via index:", q.Index != "")

	out, _ := dataset.ResolveSlot(ctx, store, "sales", 1, "inv-1")
	fmt.Println(out.Committed)
	// Output:
	// committed version 2
	// [1234] via index: false
	// true
}

// wordSource yields rows (id, name) with names drawn from words.
type wordSource struct {
	words []string
	rows  int
	next  int
	r     *rand.Rand
}

func (w *wordSource) Schema() dataset.Schema {
	return dataset.NewSchema(dataset.Field{Name: "id", Type: dataset.Int64}, dataset.Field{Name: "name", Type: dataset.String})
}

func (w *wordSource) Next(ctx context.Context) (dataset.Batch, error) {
	if w.next >= w.rows {
		return dataset.Batch{}, io.EOF
	}
	n := min(333, w.rows-w.next)
	b := dataset.Batch{Rows: n, Columns: []dataset.Column{{Int64: make([]int64, n)}, {String: make([]string, n)}}}
	for i := range n {
		b.Columns[0].Int64[i] = int64(w.next + i)
		b.Columns[1].String[i] = w.words[w.r.IntN(len(w.words))]
	}
	w.next += n
	return b, nil
}

// TestStringIndexMatchesScan: a BTREE on strings that share long prefixes, are empty, are not
// UTF-8 or differ only past their first 8 bytes answers every equality and range lookup as a
// full scan does, whether its build kept its runs in memory or spilled them.
func TestStringIndexMatchesScan(t *testing.T) {
	words := []string{"", "\x00", "\x00\x00\xff", "\xff", "\xff\xfe\xfd", "\xc3\x28", "\xe2\x82", "a", "a\x00",
		"abcdefgh", "abcdefgh\x00", "abcdefghi", "abcdefgg\xff", "abcdefgh" + strings.Repeat("z", 300),
		"https://example.com/a", "https://example.com/a/", "https://example.com/b", "https://example.com/",
		"\xf0\x9f\x98\x80", "zzzzzzzz", "zzzzzzzzz"}
	eachStore(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		_, _, err := dataset.Create(ctx, s, "words", &wordSource{words: words, rows: 5000, r: rand.New(rand.NewPCG(3, 4))},
			dataset.WriteOptions{RowsPerFragment: 1200, TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		for _, budget := range []struct {
			name  string
			bytes int64
		}{{"memory", 0}, {"spill", 1}} {
			t.Run(budget.name, func(t *testing.T) {
				spec := dataset.MutateSpec{Op: dataset.MutateReplace, Name: "by_name", Columns: []string{"name"}, Type: dataset.BTree,
					Params: map[string]string{"page_entries": "50"}}
				d, err := dataset.Open(ctx, s, "words", 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := d.Mutate(ctx, spec, dataset.MutateOptions{InvocationID: "inv-" + budget.name, TempDir: t.TempDir(),
					RunEntries: 700, MemoryBudget: budget.bytes}); err != nil {
					t.Fatal(err)
				}
				nd, err := dataset.Open(ctx, s, "words", 0)
				if err != nil {
					t.Fatal(err)
				}
				probes := append([]string{"abcdefgh\x01", "\x01", "https://example.com/aa"}, words...)
				var preds []dataset.Predicate
				for i, w := range probes {
					preds = append(preds, dataset.Eq("name", w), dataset.Between("name", w, nil), dataset.Between("name", nil, w),
						dataset.Between("name", w, probes[(i+5)%len(probes)]))
				}
				for _, p := range preds {
					indexMatchesScan(t, nd, p)
				}
			})
		}
	})
}
