package index_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/index"
	"github.com/cba1309c/steward/storage/index/build"
)

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

// Segments of the retired formats (testdata: format 1 of every key type, format 2 and 3 string
// segments, all written by development builds) are refused with ErrRetiredFormat, which names
// the fix, and still count as corrupt for callers that only tell readable from not.
func TestRetiredFormatsRefused(t *testing.T) {
	for _, name := range []string{"v1-int64", "v1-float64", "v1-string", "v2-string", "v3-string", "v3-hex"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile("testdata/btree-" + name + ".seg")
			if err != nil {
				t.Fatal(err)
			}
			var open func() error
			switch name {
			case "v1-int64":
				open = func() error { _, err := index.OpenBTree[int64](context.Background(), index.BytesReader(b)); return err }
			case "v1-float64":
				open = func() error {
					_, err := index.OpenBTree[float64](context.Background(), index.BytesReader(b))
					return err
				}
			default:
				open = func() error {
					_, err := index.OpenBTree[string](context.Background(), index.BytesReader(b))
					return err
				}
			}
			err = open()
			if !errors.Is(err, index.ErrRetiredFormat) || !errors.Is(err, storage.ErrCorrupt) || !strings.Contains(err.Error(), "rebuild the index") {
				t.Fatalf("open: %v, want ErrRetiredFormat naming the fix", err)
			}
		})
	}
}

// v1Keys regenerates the keys of testdata/btree-v2-{int64,float64}.seg (100 pairs a page, row
// ids from 1<<33).
func v1Keys() (ints []int64, floats []float64, strs []string) {
	r := rand.New(rand.NewPCG(7, 7))
	ints = append(genKeys[int64](r, 3000, 500), math.MinInt64, math.MaxInt64)
	floats = append(genKeys[float64](r, 3000, 500), math.Inf(1), math.Inf(-1), math.Copysign(0, -1))
	strs = append(genKeys[string](r, 3000, 500), "", "\xff\xfe", "k")
	return ints, floats, strs
}

// v3HexKeys: 3000 keys of 16 random hex digits.
func v3HexKeys() []string {
	r := rand.New(rand.NewPCG(3, 0))
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("%016x", r.Uint64())
	}
	return keys
}

// Numeric segments are still written in format 2, byte for byte as the writer before format 3
// wrote them (testdata/btree-v2-*.seg, same keys, 100 pairs a page, row ids from 1<<33), so a
// steward that predates format 3 reads every numeric index a newer one builds.
func TestNumericSegmentsStayFormat2(t *testing.T) {
	ints, floats, _ := v1Keys()
	for name, seg := range map[string][]byte{
		"int64":   buildBTree(t, ints, 1<<33, build.BuildOptions{PageEntries: 100}),
		"float64": buildBTree(t, floats, 1<<33, build.BuildOptions{PageEntries: 100}),
	} {
		want, err := os.ReadFile("testdata/btree-v2-" + name + ".seg")
		if err != nil {
			t.Fatal(err)
		}
		if string(want[:8]) != "STWBT002" || !bytes.Equal(seg, want) {
			t.Fatalf("%s: %d bytes starting %q, want the %d bytes of the format 2 file", name, len(seg), seg[:8], len(want))
		}
	}
	checkSegment(t, buildBTree(t, ints, 1<<33, build.BuildOptions{PageEntries: 100}), ints, 1<<33)
}

// Format 3 codes a string page's suffixes over its alphabet at every width, from one symbol
// to 128, and stores them raw past 128 or when there are none; every page reads back.
func TestFormat3StringAlphabets(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, symbols := range []int{1, 2, 3, 16, 17, 64, 65, 127, 128, 129, 256} {
		alphabet := r.Perm(256)[:symbols]
		keys := make([]string, 3000)
		for i := range keys {
			k := make([]byte, r.IntN(24))
			for j := range k {
				k[j] = byte(alphabet[r.IntN(symbols)])
			}
			keys[i] = string(k)
		}
		for _, ps := range []int{1, 7, 1024} {
			seg := buildBTree(t, keys, 5, build.BuildOptions{PageEntries: ps})
			if string(seg[:8]) != "STWBT004" {
				t.Fatalf("written as %q", seg[:8])
			}
			checkSegment(t, seg, keys, 5)
		}
	}
	same := slices.Repeat([]string{"x"}, 2500) // no suffix bytes past each page's first key
	checkSegment(t, buildBTree(t, same, 0, build.BuildOptions{}), same, 0)
	empty := slices.Repeat([]string{""}, 2500) // none at all
	checkSegment(t, buildBTree(t, empty, 0, build.BuildOptions{}), empty, 0)
}

// 16 random hex digits a key (the bench's name column): format 2 took about 15 bytes a pair,
// format 3 (front-coded, the ~10 suffix digits a key at 4 bits, the lengths packed) 9.46;
// format 4 stores their codes' differences (~50 bits at 200k keys) and the row ids.
func TestFormat4StringSize(t *testing.T) {
	const n = 200_000
	r := rand.New(rand.NewPCG(1, 1))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%016x", r.Uint64())
	}
	seg := buildBTree(t, keys, 0, build.BuildOptions{})
	t.Logf("%.2f bytes a pair", float64(len(seg))/n)
	if len(seg) > 9*n {
		t.Fatalf("hex keys: %d bytes for %d pairs (%.2f a pair)", len(seg), n, float64(len(seg))/n)
	}
	checkSegment(t, seg, keys, 0)
}

// The same keys in format 2, in both forms of numeric keys, with the extremes of every width:
// 0-bit deltas (all keys equal),
// 64-bit deltas (MinInt64 next to MaxInt64), row ids near 2^64, and a page of one pair.
func TestFormat2Extremes(t *testing.T) {
	ints, floats, strs := v1Keys()
	for _, ps := range []int{1, 7, 100, 1024} {
		opts := build.BuildOptions{PageEntries: ps}
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
	if seg := buildBTree(t, ids, 0, build.BuildOptions{}); len(seg) > 2*n {
		t.Fatalf("sorted ids: %d bytes for %d pairs", len(seg), n)
	}
	r := rand.New(rand.NewPCG(1, 1))
	prices := make([]float64, n)
	for i := range prices {
		prices[i] = float64(r.IntN(20_000)) / 100 // ten rows a price, as in the bench's 10M rows
	}
	// Row ids need 18 bits in a page of random rows; a page's 1024 prices hold about 100
	// distinct values (ten rows a price), each stored once with its run length.
	if seg := buildBTree(t, prices, 0, build.BuildOptions{}); len(seg) > 4*n {
		t.Fatalf("random prices: %d bytes for %d pairs", len(seg), n)
	}
}
