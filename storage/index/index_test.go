package index_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/index"
	"github.com/cba1309c/steward/storage/index/build"
)

func genKeys[K index.Key](r *rand.Rand, n, distinct int) []K {
	out := make([]K, n)
	for i := range out {
		v := r.IntN(distinct) - distinct/3
		switch p := any(&out[i]).(type) {
		case *int64:
			*p = int64(v)
		case *float64:
			*p = float64(v) / 4
			if r.IntN(200) == 0 {
				*p = math.NaN()
			}
		case *string:
			*p = fmt.Sprintf("k%05d", v)
		}
	}
	return out
}

func randRange[K index.Key](r *rand.Rand, keys []K) index.Range[K] {
	bound := func() *index.Bound[K] {
		if r.IntN(5) == 0 {
			return nil
		}
		return &index.Bound[K]{Value: keys[r.IntN(len(keys))], Inclusive: r.IntN(2) == 0}
	}
	if r.IntN(3) == 0 {
		return index.Point(keys[r.IntN(len(keys))])
	}
	lo, hi := bound(), bound()
	if lo != nil && hi != nil && cmp.Compare(lo.Value, hi.Value) > 0 && r.IntN(4) != 0 {
		lo, hi = hi, lo
	}
	return index.Range[K]{Lo: lo, Hi: hi}
}

func brute[K index.Key](keys []K, first uint64, match func(K) bool) []uint64 {
	var out []uint64
	for i, k := range keys {
		if match(k) {
			out = append(out, first+uint64(i))
		}
	}
	return out
}

func buildBTree[K index.Key](t testing.TB, keys []K, first uint64, opts build.BuildOptions) []byte {
	t.Helper()
	b := build.NewBTreeBuilder[K](opts)
	defer b.Close()
	for i := 0; i < len(keys); i += 100 {
		if err := b.Add(keys[i:min(i+100, len(keys))], first+uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	n, err := b.Finish(&buf)
	if err != nil || n != uint64(len(keys)) {
		t.Fatalf("finish: %d, %v", n, err)
	}
	return buf.Bytes()
}

func buildBitmap[K index.Key](t testing.TB, keys []K, first uint64) []byte {
	t.Helper()
	b := build.NewBitmapBuilder[K]()
	if err := b.Add(keys, first); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := b.Finish(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func checkType[K index.Key](t *testing.T, seed uint64) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 7))
	for _, tc := range []struct {
		name     string
		n, dist  int
		runs     int
		pageSize int
		budget   int64 // 1: spill after every run
	}{
		{"empty", 0, 1, 0, 0, 0},
		{"one", 1, 1, 0, 0, 0},
		{"dups-spill", 5000, 40, 700, 64, 1},
		{"unique-spill", 3000, 100000, 1000, 17, 1},
		{"dups-runs", 5000, 40, 700, 64, 0},
		{"some-spilled", 6000, 5000, 500, 0, 40 << 10},
		{"in-memory", 2000, 300, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := genKeys[K](r, tc.n, tc.dist)
			const first = 1 << 33 // row ids beyond 32 bits
			seg := buildBTree(t, keys, first, build.BuildOptions{RunEntries: tc.runs, PageEntries: tc.pageSize, TempDir: t.TempDir(), MemoryBudget: tc.budget})
			bt, err := index.OpenBTree[K](ctx, index.BytesReader(seg))
			if err != nil {
				t.Fatal(err)
			}
			if n, err := index.VerifyBTree[K](ctx, index.BytesReader(seg)); err != nil || n != uint64(tc.n) {
				t.Fatalf("verify: %d, %v", n, err)
			}
			bmSeg := buildBitmap(t, keys, first)
			bm, err := index.OpenBitmap[K](ctx, index.BytesReader(bmSeg))
			if err != nil {
				t.Fatal(err)
			}
			if n, err := index.VerifyBitmap[K](ctx, index.BytesReader(bmSeg)); err != nil || n != uint64(tc.n) {
				t.Fatalf("verify bitmap: %d, %v", n, err)
			}
			if tc.n == 0 {
				return
			}
			for q := range 200 {
				rg := randRange(r, keys)
				want := brute(keys, first, rg.Contains)
				got, err := bt.Search(ctx, rg)
				if err != nil {
					t.Fatal(err)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("query %d btree: %d ids, want %d", q, len(got), len(want))
				}
				bits, err := bm.Search(ctx, rg)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(bits.ToArray(), want) {
					t.Fatalf("query %d bitmap: %d ids, want %d", q, bits.GetCardinality(), len(want))
				}
				in := []K{keys[r.IntN(len(keys))], keys[r.IntN(len(keys))], genKeys[K](r, 1, tc.dist*2)[0]}
				wantIn := brute(keys, first, func(k K) bool {
					return slices.ContainsFunc(in, func(x K) bool { return cmp.Compare(x, k) == 0 })
				})
				bits, err = bm.In(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(bits.ToArray(), wantIn) {
					t.Fatalf("query %d IN: %d ids, want %d", q, bits.GetCardinality(), len(wantIn))
				}
			}
		})
	}
}

// TestIndexesMatchBruteForce is the property test of both segment kinds: random keys with
// duplicates (and NaN for floats), forced spills, tiny pages, random ranges and IN lists.
func TestIndexesMatchBruteForce(t *testing.T) {
	t.Run("int64", func(t *testing.T) { checkType[int64](t, 1) })
	t.Run("float64", func(t *testing.T) { checkType[float64](t, 2) })
	t.Run("string", func(t *testing.T) { checkType[string](t, 3) })
}

func TestKeyTypeMismatch(t *testing.T) {
	ctx := context.Background()
	seg := buildBTree(t, []int64{1, 2, 3}, 0, build.BuildOptions{})
	if _, err := index.OpenBTree[string](ctx, index.BytesReader(seg)); !errors.Is(err, index.ErrKeyType) {
		t.Fatalf("err = %v", err)
	}
	bm := buildBitmap(t, []string{"a"}, 0)
	if _, err := index.OpenBitmap[int64](ctx, index.BytesReader(bm)); !errors.Is(err, index.ErrKeyType) {
		t.Fatalf("err = %v", err)
	}
}

// verifyBTree decodes every page of seg as a segment of K keys.
func verifyBTree[K index.Key](seg []byte) error {
	_, err := index.VerifyBTree[K](context.Background(), index.BytesReader(seg))
	return err
}

// TestCorruptSegments truncates and flips every byte position of small segments: each must
// fail with a storage.ErrCorrupt error (or still answer correctly), never panic.
func TestCorruptSegments(t *testing.T) {
	ctx := context.Background()
	keys := []string{"b", "a", "c", "a", "d", "b", "e"}
	segs := map[string][]byte{
		"btree":       buildBTree(t, keys, 10, build.BuildOptions{PageEntries: 2}),
		"btree-int":   buildBTree(t, []int64{5, -3, 5, 1 << 50, 7}, 1<<40, build.BuildOptions{PageEntries: 2}),
		"btree-float": buildBTree(t, []float64{0.5, -3, math.Inf(1), 0.25}, 3, build.BuildOptions{PageEntries: 3}),
		"btree-runs":  buildBTree(t, []int64{9, 9, 9, 9, 9, 9, 9, 9, 1 << 40, 1 << 40, 1 << 40, 1 << 40, 1 << 40, 1 << 40}, 0, build.BuildOptions{PageEntries: 14}),
		"bitmap":      buildBitmap(t, keys, 10),
	}
	verify := map[string]func([]byte) error{
		"btree":       verifyBTree[string],
		"btree-int":   verifyBTree[int64],
		"btree-runs":  verifyBTree[int64],
		"btree-float": verifyBTree[float64],
		"bitmap": func(b []byte) error {
			_, err := index.VerifyBitmap[string](ctx, index.BytesReader(b))
			return err
		},
	}
	for name, seg := range segs {
		t.Run(name+"/truncated", func(t *testing.T) {
			for n := range len(seg) {
				if err := verify[name](seg[:n]); !errors.Is(err, storage.ErrCorrupt) {
					t.Fatalf("truncated to %d: %v", n, err)
				}
			}
		})
		t.Run(name+"/bitflip", func(t *testing.T) {
			for i := range len(seg) {
				b := bytes.Clone(seg)
				b[i] ^= 0x10
				if err := verify[name](b); err != nil && !errors.Is(err, storage.ErrCorrupt) {
					t.Fatalf("flip at %d: unclassified %v", i, err)
				}
			}
		})
	}
}

func TestWriterRejectsUnsorted(t *testing.T) {
	w, err := index.NewBTreeWriter[int64](&bytes.Buffer{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Add(5, 1)
	if err := w.Add(4, 2); !errors.Is(err, index.ErrUnsorted) {
		t.Fatalf("err = %v", err)
	}
}

func TestBitmapTooManyKeys(t *testing.T) {
	b := build.NewBitmapBuilder[int64]()
	b.MaxKeys = 3
	if err := b.Add([]int64{1, 2, 3, 4}, 0); !errors.Is(err, build.ErrTooManyKeys) {
		t.Fatalf("err = %v", err)
	}
}

// TestBitmapAddStrings: string keys fed as page bytes and offsets build the very segment
// their Go strings build (keys empty, not UTF-8, sharing prefixes, repeated across calls, the
// bytes cleared after each call), count towards MaxKeys alike, and bad offsets or a numeric
// builder are refused.
func TestBitmapAddStrings(t *testing.T) {
	words := []string{"", "\x00", "\xff", "\xc3\x28", "a", "a\x00", "abcdefgh", "abcdefghi", "https://x/a", "https://x/a/"}
	r := rand.New(rand.NewPCG(11, 12))
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = words[r.IntN(len(words))]
	}
	want := buildBitmap(t, keys, 40)
	b := build.NewBitmapBuilder[string]()
	for lo := 0; lo < len(keys); lo += 777 {
		batch := keys[lo:min(lo+777, len(keys))]
		data := []byte("page header")
		offs := []uint32{uint32(len(data))}
		for _, k := range batch {
			data = append(data, k...)
			offs = append(offs, uint32(len(data)))
		}
		data = append(data, "trailer"...)
		if err := b.AddStrings(data, offs, 40+uint64(lo)); err != nil {
			t.Fatal(err)
		}
		clear(data)
	}
	var got bytes.Buffer
	if n, err := b.Finish(&got); err != nil || n != uint64(len(keys)) {
		t.Fatalf("finish: %d, %v", n, err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("AddStrings built %d bytes unlike Add's %d", got.Len(), len(want))
	}

	few := build.NewBitmapBuilder[string]()
	few.MaxKeys = 2
	if err := few.AddStrings([]byte("abc"), []uint32{0, 1, 2, 3}, 0); !errors.Is(err, build.ErrTooManyKeys) {
		t.Fatalf("a third key: %v", err)
	}
	if err := build.NewBitmapBuilder[string]().AddStrings([]byte("abcdef"), []uint32{0, 4, 2}, 0); err == nil {
		t.Fatal("descending offsets accepted")
	}
	if err := build.NewBitmapBuilder[string]().AddStrings([]byte("abc"), []uint32{0, 9}, 0); err == nil {
		t.Fatal("offsets past the data accepted")
	}
	if err := build.NewBitmapBuilder[int64]().AddStrings([]byte("a"), []uint32{0, 1}, 0); err == nil {
		t.Fatal("AddStrings on a numeric builder accepted")
	}
}

func Example() {
	ctx := context.Background()
	b := build.NewBTreeBuilder[int64](build.BuildOptions{})
	defer b.Close()
	_ = b.Add([]int64{30, 10, 20, 10}, 100) // row ids 100..103
	var seg bytes.Buffer
	_, _ = b.Finish(&seg)
	bt, _ := index.OpenBTree[int64](ctx, index.BytesReader(seg.Bytes()))
	ids, _ := bt.Search(ctx, index.Point[int64](10))
	fmt.Println(ids)
	// Output: [101 103]
}

// TestBitmapManyRowsPerKey: keys with many times a batch of row ids each (the batches go into
// the bitmaps on the builder's adder goroutine) get exactly their rows, NaN included, fed in
// calls of odd sizes; a builder closed unfinished ends its adder.
func TestBitmapManyRowsPerKey(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(21, 22))
	vals := []float64{math.NaN(), -1, 0.5, 7}
	keys := make([]float64, 200_000)
	want := make([]*roaring64.Bitmap, len(vals))
	for i := range want {
		want[i] = roaring64.New()
	}
	const first = 1 << 33 // row ids past 32 bits
	for i := range keys {
		v := r.IntN(len(vals))
		keys[i] = vals[v]
		want[v].Add(first + uint64(i))
	}
	b := build.NewBitmapBuilder[float64]()
	for lo := 0; lo < len(keys); {
		n := min(1+r.IntN(9000), len(keys)-lo)
		if err := b.Add(keys[lo:lo+n], first+uint64(lo)); err != nil {
			t.Fatal(err)
		}
		lo += n
	}
	var seg bytes.Buffer
	if n, err := b.Finish(&seg); err != nil || n != uint64(len(keys)) {
		t.Fatalf("finish: %d, %v", n, err)
	}
	br, err := index.OpenBitmap[float64](ctx, index.BytesReader(seg.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		got, err := br.Equal(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equals(want[i]) {
			t.Errorf("key %v: %d rows, want %d", v, got.GetCardinality(), want[i].GetCardinality())
		}
	}

	before := runtime.NumGoroutine()
	unfinished := build.NewBitmapBuilder[float64]()
	if err := unfinished.Add(keys, 0); err != nil {
		t.Fatal(err)
	}
	if runtime.NumGoroutine() <= before {
		t.Fatal("no adder goroutine running for a builder with full batches")
	}
	if err := unfinished.Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Close, %d before the build", runtime.NumGoroutine(), before)
		}
	}
}
