package build_test

import (
	"bytes"
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cba1309c/steward/storage/index"
	"github.com/cba1309c/steward/storage/index/build"
)

// scanAll returns every (key, row id) pair of a segment in segment order.
func scanAll[K index.Key](t *testing.T, seg []byte) ([]K, []uint64) {
	t.Helper()
	ctx := context.Background()
	bt, err := index.OpenBTree[K](ctx, index.BytesReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	var keys []K
	var ids []uint64
	err = bt.Scan(ctx, index.Range[K]{}, func(k K, id uint64) bool {
		keys, ids = append(keys, k), append(ids, id)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys, ids
}

type batch[K index.Key] struct {
	keys  []K
	first uint64
}

// checkOrder builds from batches (row ids in any order) and checks the segment holds exactly
// the input pairs sorted by (cmp.Compare of key, row id).
func checkOrder[K index.Key](t *testing.T, batches []batch[K], opts build.BuildOptions) build.BuildStats {
	t.Helper()
	return checkOrderFed(t, batches, opts, func(b *build.BTreeBuilder[K], bt batch[K]) error { return b.Add(bt.keys, bt.first) })
}

// addAsPage feeds a string batch through AddStrings the way a Parquet page holds it: one byte
// buffer (with unrelated bytes before and after the values) and n+1 offsets.
func addAsPage(b *build.BTreeBuilder[string], bt batch[string]) error {
	data := []byte("page header junk")
	offs := []uint32{uint32(len(data))}
	for _, k := range bt.keys {
		data = append(data, k...)
		offs = append(offs, uint32(len(data)))
	}
	data = append(data, "trailing junk"...)
	err := b.AddStrings(data, offs, bt.first)
	clear(data) // the builder must have copied what it keeps
	return err
}

func checkOrderFed[K index.Key](t *testing.T, batches []batch[K], opts build.BuildOptions, feed func(*build.BTreeBuilder[K], batch[K]) error) build.BuildStats {
	t.Helper()
	type pair struct {
		k  K
		id uint64
	}
	var want []pair
	b := build.NewBTreeBuilder[K](opts)
	defer b.Close()
	for _, bt := range batches {
		if err := feed(b, bt); err != nil {
			t.Fatal(err)
		}
		for i, k := range bt.keys {
			want = append(want, pair{k, bt.first + uint64(i)})
		}
	}
	slices.SortFunc(want, func(a, b pair) int {
		if c := cmp.Compare(a.k, b.k); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	var seg bytes.Buffer
	if n, err := b.Finish(&seg); err != nil || n != uint64(len(want)) {
		t.Fatalf("finish: %d, %v", n, err)
	}
	keys, ids := scanAll[K](t, seg.Bytes())
	if len(keys) != len(want) {
		t.Fatalf("%d pairs, want %d", len(keys), len(want))
	}
	for i, w := range want {
		if cmp.Compare(keys[i], w.k) != 0 || ids[i] != w.id {
			t.Fatalf("pair %d = (%v, %d), want (%v, %d)", i, keys[i], ids[i], w.k, w.id)
		}
	}
	return b.Stats()
}

// drawBatches makes one batch of per keys drawn from pool at each first row id.
func drawBatches[K index.Key](r *rand.Rand, pool []K, firsts []uint64, per int) []batch[K] {
	var bs []batch[K]
	for _, f := range firsts {
		ks := make([]K, per)
		for i := range ks {
			ks[i] = pool[r.IntN(len(pool))]
		}
		bs = append(bs, batch[K]{ks, f})
	}
	return bs
}

type buildMode struct {
	name string
	o    build.BuildOptions
}

// buildModes is one build in memory and the same one spilled after every run, with runs of
// runEntries pairs (and spillPage pairs a page when spilled).
func buildModes(t *testing.T, runEntries, spillPage int) []buildMode {
	dir := t.TempDir()
	return []buildMode{
		{"memory", build.BuildOptions{RunEntries: runEntries, TempDir: dir}},
		{"spill", build.BuildOptions{RunEntries: runEntries, MemoryBudget: 1, PageEntries: spillPage, TempDir: dir}},
	}
}

// TestBTreeBuildOrder covers the sort paths: presorted input, row ids that are not one
// ascending sequence, float spellings cmp.Compare holds equal, strings that tie on their
// 8-byte prefix, in memory and spilled.
func TestBTreeBuildOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	shuffledIDs := func(n, per int) []uint64 {
		var firsts []uint64
		for i := 0; i < n; i += per {
			firsts = append(firsts, uint64(i)+1<<40)
		}
		r.Shuffle(len(firsts), func(i, j int) { firsts[i], firsts[j] = firsts[j], firsts[i] })
		return firsts
	}
	for _, opts := range buildModes(t, 300, 7) {
		t.Run(opts.name+"/presorted-int", func(t *testing.T) {
			keys := make([]int64, 2000)
			for i := range keys {
				keys[i] = int64(i/3) - 100
			}
			var bs []batch[int64]
			for i := 0; i < len(keys); i += 128 {
				bs = append(bs, batch[int64]{keys[i:min(i+128, len(keys))], uint64(i)})
			}
			checkOrder(t, bs, opts.o)
		})
		t.Run(opts.name+"/shuffled-ids-int", func(t *testing.T) {
			var bs []batch[int64]
			for _, f := range shuffledIDs(3000, 50) {
				ks := make([]int64, 50)
				for i := range ks {
					ks[i] = r.Int64N(20) - 10
				}
				bs = append(bs, batch[int64]{ks, f})
			}
			checkOrder(t, bs, opts.o)
		})
		t.Run(opts.name+"/floats", func(t *testing.T) {
			special := []float64{math.NaN(), math.Copysign(0, -1), 0, math.Inf(1), math.Inf(-1), -math.MaxFloat64,
				math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, math.Float64frombits(0xfff8000000000001), 1.5, -1.5}
			checkOrder(t, drawBatches(r, special, shuffledIDs(2000, 40), 40), opts.o)
		})
		t.Run(opts.name+"/strings", func(t *testing.T) {
			words := []string{"", "a", "a\x00", "a\x00\x00", "abcdefgh", "abcdefgh\x00", "abcdefghi", "abcdefgg\xff",
				"abcdefgh" + strings.Repeat("z", 100), "\xff\xff\xff\xff\xff\xff\xff\xff", "b"}
			checkOrder(t, drawBatches(r, words, shuffledIDs(2000, 40), 40), opts.o)
		})
		t.Run(opts.name+"/strings-as-pages", func(t *testing.T) {
			// Shared prefixes, empty strings, invalid UTF-8, through the byte path of a build.
			words := []string{"", "", "\xff\xfe", "\xc3\x28", "abc", "abcdefgh", "abcdefghX", "abcdefghY" + strings.Repeat("y", 40),
				"prefix/shared/a", "prefix/shared/b", "prefix/shared/", "\x00", "\x00\x00\xff"}
			bs := drawBatches(r, words, shuffledIDs(2000, 40), 40)
			checkOrderFed(t, bs, opts.o, addAsPage)
		})
		t.Run(opts.name+"/presorted-strings", func(t *testing.T) {
			var ks []string
			for i := range 1000 {
				ks = append(ks, strings.Repeat("x", i%13)+string(rune('a'+i/50)))
			}
			slices.Sort(ks)
			checkOrder(t, []batch[string]{{ks[:500], 0}, {ks[500:], 500}}, opts.o)
		})
	}
}

// TestBTreeBuildBudget: runs stay in memory under the budget and spill beyond it.
func TestBTreeBuildBudget(t *testing.T) {
	keys := make([]int64, 10000)
	r := rand.New(rand.NewPCG(1, 1))
	for i := range keys {
		keys[i] = r.Int64()
	}
	bs := []batch[int64]{{keys, 0}}
	st := checkOrder(t, bs, build.BuildOptions{RunEntries: 1000})
	if st.Runs != 10 || st.Spills != 0 {
		t.Fatalf("default budget: %+v", st)
	}
	st = checkOrder(t, bs, build.BuildOptions{RunEntries: 1000, MemoryBudget: 60 << 10, TempDir: t.TempDir()})
	if st.Spills == 0 || st.SpilledBytes == 0 || st.PeakBytes > 60<<10+2*1000*12 {
		t.Fatalf("60 KiB budget: %+v", st)
	}
}

// TestAddStringsRefusesBadOffsets: offsets out of order or past the data are an error, never a
// panic or a wrong key.
func TestAddStringsRefusesBadOffsets(t *testing.T) {
	b := build.NewBTreeBuilder[string](build.BuildOptions{TempDir: t.TempDir()})
	defer b.Close()
	if err := b.AddStrings([]byte("abcdef"), []uint32{0, 4, 2}, 0); err == nil {
		t.Fatal("descending offsets accepted")
	}
	if err := b.AddStrings([]byte("abc"), []uint32{0, 9}, 0); err == nil {
		t.Fatal("offsets past the data accepted")
	}
	n := build.NewBTreeBuilder[int64](build.BuildOptions{TempDir: t.TempDir()})
	defer n.Close()
	if err := n.AddStrings([]byte("a"), []uint32{0, 1}, 0); err == nil {
		t.Fatal("AddStrings on a numeric builder accepted")
	}
}

// TestNumericBuildPaths covers the numeric build's sort and write paths against a full sort:
// buckets sorted as packed words or side by side (end buckets holding extreme keys, ids out
// of order), runs in order written as they are (chained) or merged (overlapping), long runs
// of one key, a narrow band of keys inside one wide bucket; in memory and spilled, row ids
// past 32 bits.
func TestNumericBuildPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	ascending := func(n, per int, base uint64) []uint64 {
		var firsts []uint64
		for i := 0; i < n; i += per {
			firsts = append(firsts, base+uint64(i))
		}
		return firsts
	}
	ints := func(n int, f func(i int) int64) []int64 {
		ks := make([]int64, n)
		for i := range ks {
			ks[i] = f(i)
		}
		return ks
	}
	batches := func(keys []int64, per int, base uint64) []batch[int64] {
		var bs []batch[int64]
		for i := 0; i < len(keys); i += per {
			bs = append(bs, batch[int64]{keys[i:min(i+per, len(keys))], base + uint64(i)})
		}
		return bs
	}
	extremes := []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, math.MaxInt64 - 1, math.MaxInt64}
	for _, mode := range buildModes(t, 1000, 13) {
		t.Run(mode.name+"/cents", func(t *testing.T) {
			var bs []batch[float64]
			for _, f := range ascending(20000, 100, 1<<40) {
				ks := make([]float64, 100)
				for i := range ks {
					ks[i] = float64(r.IntN(100_000)) / 100
				}
				bs = append(bs, batch[float64]{ks, f})
			}
			checkOrder(t, bs, mode.o)
		})
		t.Run(mode.name+"/float-specials-ascending-ids", func(t *testing.T) {
			special := []float64{math.NaN(), math.Copysign(0, -1), 0, math.Inf(1), math.Inf(-1), -math.MaxFloat64, math.MaxFloat64,
				math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 1.5, -1.5, 2.25, 1e300, -1e-300}
			var pool []float64
			for range 50 {
				pool = append(pool, float64(r.IntN(1000))/8)
			}
			pool = append(pool, special...)
			checkOrder(t, drawBatches(r, pool, ascending(12000, 60, 1<<33), 60), mode.o)
		})
		t.Run(mode.name+"/int-extremes", func(t *testing.T) {
			keys := ints(15000, func(i int) int64 {
				if i%7 == 0 {
					return extremes[r.IntN(len(extremes))]
				}
				return r.Int64N(1<<20) - 1<<19
			})
			checkOrder(t, batches(keys, 128, 1<<40), mode.o)
		})
		t.Run(mode.name+"/int-extremes-shuffled-ids", func(t *testing.T) {
			var bs []batch[int64]
			firsts := ascending(8000, 40, 1<<36)
			r.Shuffle(len(firsts), func(i, j int) { firsts[i], firsts[j] = firsts[j], firsts[i] })
			for _, f := range firsts {
				bs = append(bs, batch[int64]{ints(40, func(int) int64 { return extremes[r.IntN(len(extremes))] + r.Int64N(3) - 1 }), f})
			}
			checkOrder(t, bs, mode.o)
		})
		t.Run(mode.name+"/uniform-int64", func(t *testing.T) {
			checkOrder(t, batches(ints(12000, func(int) int64 { return int64(r.Uint64()) }), 500, 0), mode.o)
		})
		t.Run(mode.name+"/uniform-int64-long-runs", func(t *testing.T) {
			// 52 bits under a bucket and 13 bits of entry number: one bit too wide to pack a
			// word, so a word and a byte (idxHi) hold each entry.
			o := mode.o
			o.RunEntries = 5000
			checkOrder(t, batches(ints(23000, func(int) int64 { return int64(r.Uint64()) }), 700, 1<<40), o)
		})
		t.Run(mode.name+"/uniform-int64-huge-runs", func(t *testing.T) {
			// 52 bits and 21 of entry number: too wide for a word and a byte, so keys and
			// entry numbers side by side; the short last run takes a word and a byte.
			o := mode.o
			o.RunEntries = 1<<20 + 1
			checkOrder(t, batches(ints(1<<20+30000, func(int) int64 { return int64(r.Uint64()) }), 4096, 1<<40), o)
		})
		t.Run(mode.name+"/few-keys-many-dups", func(t *testing.T) {
			checkOrder(t, batches(ints(20000, func(int) int64 { return r.Int64N(3) * 1e15 }), 333, 7), mode.o)
		})
		t.Run(mode.name+"/narrow-band-in-wide-bucket", func(t *testing.T) {
			// The first run fixes wide buckets; later runs crowd one of them with distinct keys.
			keys := ints(12000, func(i int) int64 {
				if i < 1000 {
					return int64(r.Uint64())
				}
				return 1<<40 + r.Int64N(1<<30)
			})
			checkOrder(t, batches(keys, 250, 1<<34), mode.o)
		})
		t.Run(mode.name+"/sorted-chained", func(t *testing.T) {
			checkOrder(t, batches(ints(10000, func(i int) int64 { return int64(i/5) + math.MinInt64 + 1 }), 100, 1<<40), mode.o)
		})
		t.Run(mode.name+"/sorted-overlapping-runs", func(t *testing.T) {
			// Every run is in order, but each starts below where the one before ended.
			checkOrder(t, batches(ints(10000, func(i int) int64 { return int64(i%1000) / 2 }), 100, 0), mode.o) // RunEntries 1000: each run is 0..499, twice
		})
		t.Run(mode.name+"/sorted-runs-ids-going-back", func(t *testing.T) {
			// Each run in order and the keys meet at the run boundary, but the later run's
			// row ids come first.
			keys := ints(1000, func(i int) int64 { return int64(i / 10) })
			more := ints(1000, func(i int) int64 { return 99 + int64(i/10) })
			checkOrder(t, []batch[int64]{{keys, 5000}, {more, 0}}, mode.o)
		})
		t.Run(mode.name+"/sorted-floats-then-back", func(t *testing.T) {
			// In order (NaN first, -0 beside +0) for three runs, written ahead, then read back
			// when the fourth starts below them.
			asc := []float64{math.NaN(), math.Inf(-1), -math.MaxFloat64, -1, math.Copysign(0, -1), 0, math.SmallestNonzeroFloat64, 1, math.MaxFloat64, math.Inf(1)}
			ks := make([]float64, 0, 4000)
			for i := range 3000 {
				ks = append(ks, asc[i*len(asc)/3000])
			}
			for range 1000 {
				ks = append(ks, asc[r.IntN(len(asc))])
			}
			var bs []batch[float64]
			for i := 0; i < len(ks); i += 200 {
				bs = append(bs, batch[float64]{ks[i : i+200], 1<<35 + uint64(i)})
			}
			checkOrder(t, bs, mode.o)
		})
		t.Run(mode.name+"/sorted-then-shuffled", func(t *testing.T) {
			checkOrder(t, batches(ints(10000, func(i int) int64 {
				if i < 3000 {
					return int64(i)
				}
				return r.Int64N(5000)
			}), 100, 0), mode.o)
		})
	}
}
