package index_test

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/cba1309c/steward/storage/index"
)

// v1Keys regenerates the keys of the format 1 segments in testdata (written, 100 pairs a page,
// row ids from 1<<33, by the format 1 writer before format 2 replaced it).
func v1Keys() (ints []int64, floats []float64, strs []string) {
	r := rand.New(rand.NewPCG(7, 7))
	ints = append(genKeys[int64](r, 3000, 500), math.MinInt64, math.MaxInt64)
	floats = append(genKeys[float64](r, 3000, 500), math.Inf(1), math.Inf(-1), math.Copysign(0, -1))
	strs = append(genKeys[string](r, 3000, 500), "", "\xff\xfe", "k")
	return ints, floats, strs
}

// checkSegment compares a full scan and random ranges of seg with keys at row ids from first.
func checkSegment[K index.Key](t *testing.T, seg []byte, keys []K, first uint64) {
	t.Helper()
	ctx := context.Background()
	bt, err := index.OpenBTree[K](ctx, index.BytesReader(seg))
	if err != nil {
		t.Fatal(err)
	}
	type pair struct {
		k  K
		id uint64
	}
	var want, got []pair
	for i, k := range keys {
		want = append(want, pair{k, first + uint64(i)})
	}
	slices.SortFunc(want, func(a, b pair) int { return cmp.Or(cmp.Compare(a.k, b.k), cmp.Compare(a.id, b.id)) })
	if err := bt.Scan(ctx, index.Range[K]{}, func(k K, id uint64) bool { got = append(got, pair{k, id}); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("scan: %d pairs, want %d", len(got), len(want))
	}
	for i := range want {
		if cmp.Compare(got[i].k, want[i].k) != 0 || got[i].id != want[i].id {
			t.Fatalf("pair %d: (%v, %d), want (%v, %d)", i, got[i].k, got[i].id, want[i].k, want[i].id)
		}
	}
	r := rand.New(rand.NewPCG(5, 5))
	for q := range 100 {
		rg := randRange(r, keys)
		ids, err := bt.Search(ctx, rg)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		if w := brute(keys, first, rg.Contains); !slices.Equal(ids, w) {
			t.Fatalf("query %d: %d ids, want %d", q, len(ids), len(w))
		}
	}
}

// Segments written before the bit-packed pages stay readable, with the same answers.
func TestFormat1SegmentsStillRead(t *testing.T) {
	ints, floats, strs := v1Keys()
	read := func(name string) []byte {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if string(b[:8]) != "STWBT001" {
			t.Fatalf("%s is not a format 1 segment", name)
		}
		return b
	}
	t.Run("int64", func(t *testing.T) { checkSegment(t, read("btree-v1-int64.seg"), ints, 1<<33) })
	t.Run("float64", func(t *testing.T) { checkSegment(t, read("btree-v1-float64.seg"), floats, 1<<33) })
	t.Run("string", func(t *testing.T) { checkSegment(t, read("btree-v1-string.seg"), strs, 1<<33) })
}

// The same keys in format 2, in both forms of numeric keys, with the extremes of every width:
// 0-bit deltas (all keys equal),
// 64-bit deltas (MinInt64 next to MaxInt64), row ids near 2^64, and a page of one pair.
func TestFormat2Extremes(t *testing.T) {
	ints, floats, strs := v1Keys()
	for _, ps := range []int{1, 7, 100, 1024} {
		opts := index.BuildOptions{PageEntries: ps}
		checkSegment(t, buildBTree(t, ints, 1<<33, opts), ints, 1<<33)
		checkSegment(t, buildBTree(t, floats, math.MaxUint64-4000, opts), floats, math.MaxUint64-4000)
		checkSegment(t, buildBTree(t, strs, 0, opts), strs, 0)
		same := slices.Repeat([]int64{42}, 2500)
		checkSegment(t, buildBTree(t, same, 0, opts), same, 0)
		pair := []int64{math.MaxInt64, math.MinInt64}
		checkSegment(t, buildBTree(t, pair, math.MaxUint64-1, opts), pair, math.MaxUint64-1)
		long := []string{string(make([]byte, 70000)), string(make([]byte, 70001)), "\x00", ""}
		checkSegment(t, buildBTree(t, long, 9, opts), long, 9)
	}
}

// A sorted id column packs to under 2 bytes a pair (format 1 took 16), and random numbers
// with random row ids to about their information: the format's reason to be.
func TestFormat2Size(t *testing.T) {
	const n = 200_000
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = int64(i)
	}
	if seg := buildBTree(t, ids, 0, index.BuildOptions{}); len(seg) > 2*n {
		t.Fatalf("sorted ids: %d bytes for %d pairs", len(seg), n)
	}
	r := rand.New(rand.NewPCG(1, 1))
	prices := make([]float64, n)
	for i := range prices {
		prices[i] = float64(r.IntN(20_000)) / 100 // ten rows a price, as in the bench's 10M rows
	}
	// Row ids need 18 bits in a page of random rows; a page's 1024 prices hold about 100
	// distinct values (ten rows a price), each stored once with its run length.
	if seg := buildBTree(t, prices, 0, index.BuildOptions{}); len(seg) > 4*n {
		t.Fatalf("random prices: %d bytes for %d pairs", len(seg), n)
	}
}
