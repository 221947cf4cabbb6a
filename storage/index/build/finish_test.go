package build

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage/index"
)

// TestStringFinishMatchesSerialWriter builds string segments through the range-by-range
// Finish, in chunks down to a page, and requires every byte to equal the segment the plain
// writer makes of the same pairs sorted in one piece: pages, lookup and trailer. Keys cover
// the gathered and sorted ranges (random hex), one range of everything (a shared 8-byte
// prefix: sorted in cache while small, merged from the runs past maxGather), ties on the whole
// key decided by row id, empty strings, invalid UTF-8 and NUL bytes, input already in order,
// and row ids that are not one ascending sequence. Every build runs twice: by ranges (the
// key code off), and as it comes, where the keys that fit a code (see KeyCode) take it: in
// its fixed and terminated forms, bucketed, chained in order, merged from runs in order and
// bucketed ones, and ended by a later run (one spill).
func TestStringFinishMatchesSerialWriter(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 2))
	hex := func(int) string { return strconv.FormatUint(r.Uint64()|1<<63, 16) }
	url := func(int) string { return "https://" + strconv.FormatUint(r.Uint64N(1<<40), 36) }
	words := []string{"", "\x00", "a", "a\x00", "\xff\xfe", "\xc3\x28", "abcdefgh", "abcdefgh\x00", "abcdefghX" + strings.Repeat("y", 70), "b"}
	few := func(int) string { return words[r.IntN(len(words))] }
	ordered := func(i int) string { return fmt.Sprintf("k%08d", i) }
	short := []string{"", "\x00", "a", "a\x00", "ab", "b", "ba", "b\x00\x00"}
	fewShort := func(int) string { return short[r.IntN(len(short))] }
	halfOrdered := func(i int) string { // runs in order, then runs out of order, one alphabet
		if i < 6000 {
			return ordered(i)
		}
		return ordered(r.IntN(1e8))
	}
	hexThenZ := func(i int) string { // the code of the first runs has no z
		if i == 9700 { // mid-run, fed as a page (see below)
			return "zz"
		}
		return hex(i)
	}
	const (
		ranges = iota // not coded: the keys do not fit a code
		fixed
		terminated
		ended // coded, until a later run's key did not fit
	)
	type build struct {
		name              string
		n                 int
		key               func(int) string
		runEntries, pages int
		shuffled          bool // batches of row ids out of order
		oneRange          bool
		code              int // the path the build takes when its keys may be coded
	}
	builds := []build{
		{"hex", 20000, hex, 1500, 16, false, false, fixed},
		{"hex-shuffled-ids", 20000, hex, 1500, 7, true, false, fixed},
		{"hex-one-run", 5000, hex, 1 << 16, 3, false, false, fixed},
		{"shared-prefix", 20000, url, 2000, 16, false, true, ranges},
		// Runs of 40000 sort their one range before packing (over sortAbove) but for the
		// last, smaller one: the merge takes sorted pieces and one sorted at Finish.
		{"shared-prefix-merged", maxGather + 5000, url, 40000, 1024, false, true, ranges},
		// Every piece packed unsorted, the range too large to gather: all sorted at Finish.
		{"shared-prefix-pieces", maxGather + 5000, url, 20000, 1024, true, true, ranges},
		{"ties", 20000, few, 900, 5, true, false, ranges},
		{"ordered", 12000, ordered, 1000, 16, false, false, terminated},
		{"short-ties", 20000, fewShort, 900, 5, true, false, terminated},
		{"short-ties-ascending", 20000, fewShort, 900, 5, false, false, terminated},
		{"half-ordered", 12000, halfOrdered, 1000, 16, false, false, terminated},
		{"code-ended", 20000, hexThenZ, 1500, 16, false, false, ended},
	}
	for _, bd := range builds {
		type pair struct {
			k  string
			id uint64
		}
		var pairs []pair
		var firsts []uint64
		const per = 500
		for i := 0; i < bd.n; i += per {
			firsts = append(firsts, uint64(i)+1<<33)
		}
		if bd.shuffled {
			r.Shuffle(len(firsts), func(i, j int) { firsts[i], firsts[j] = firsts[j], firsts[i] })
		}
		var batches [][]string
		for bi, f := range firsts {
			var ks []string
			for i := range min(per, bd.n-bi*per) {
				k := bd.key(bi*per + i)
				ks = append(ks, k)
				pairs = append(pairs, pair{k, f + uint64(i)})
			}
			batches = append(batches, ks)
		}
		slices.SortFunc(pairs, func(a, b pair) int { return cmp.Or(strings.Compare(a.k, b.k), cmp.Compare(a.id, b.id)) })
		want := serialSegment(t, bd.pages, len(pairs), func(i int) (string, uint64) { return pairs[i].k, pairs[i].id })
		for _, tc := range []struct {
			chunk  int
			noCode bool
		}{{0, true}, {1, true}, {bd.pages * 3, true}, {4999, true}, {0, false}, {1, false}, {4999, false}} {
			t.Run(fmt.Sprintf("%s/chunk-%d/coded-%v", bd.name, tc.chunk, !tc.noCode), func(t *testing.T) {
				b := NewBTreeBuilder[string](BuildOptions{RunEntries: bd.runEntries, PageEntries: bd.pages, TempDir: t.TempDir()})
				defer b.Close()
				b.chunkEntries, b.noCode = tc.chunk, tc.noCode
				path := bd.code
				if tc.noCode {
					path = ranges
				}
				for i, ks := range batches {
					// Every other batch as a page's bytes and offsets, as scanColumn feeds
					// plain pages: both are coded as runs fill, and either may end the code.
					var err error
					if i%2 == 0 {
						err = b.Add(ks, firsts[i])
					} else {
						data, offs := []byte("junk"), []uint32{4}
						for _, k := range ks {
							data = append(data, k...)
							offs = append(offs, uint32(len(data)))
						}
						err = b.AddStrings(data, offs, firsts[i])
						clear(data) // what the builder keeps, it copied
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				var got bytes.Buffer
				n, err := b.Finish(&got)
				if err != nil || n != uint64(len(pairs)) {
					t.Fatalf("finish: %d, %v; want %d pairs", n, err, len(pairs))
				}
				// Ending the code spills the coded runs, and the string runs after them join
				// that file at Finish as one more.
				if spills := b.stats.Spills; spills != 0 && path != ended || spills != 2 && path == ended {
					t.Fatalf("%d spills: the build did not stay in memory (or spill twice, ending its code)", spills)
				}
				switch {
				case path == fixed || path == terminated:
					if b.code == nil || (b.code.Fixed() >= 0) != (path == fixed) || b.ranges != nil {
						t.Fatalf("code %+v, ranges %v: the build did not take the path it was made for", b.code, b.ranges != nil)
					}
				case b.code != nil:
					t.Fatal("the keys were left coded")
				case b.ranges.n == 1 != bd.oneRange:
					t.Fatalf("%d ranges: the build did not take the path it was made for", b.ranges.n)
				}
				want := want
				if b.code != nil {
					// Coded pages: the serial writer takes the same code, and each page the
					// same form (coded or front-coded, whichever is shorter).
					want = codedSerialSegment(t, b.code, bd.pages, len(pairs), func(i int) (string, uint64) { return pairs[i].k, pairs[i].id })
				}
				if !bytes.Equal(got.Bytes(), want.Bytes()) {
					g, w := got.Bytes(), want.Bytes()
					at := 0
					for at < min(len(g), len(w)) && g[at] == w[at] {
						at++
					}
					t.Fatalf("segment differs from the serial writer's at byte %d (%d vs %d bytes)", at, len(g), len(w))
				}
			})
		}
	}
}

// failAfter accepts n bytes, then fails every write.
type failAfter struct{ n int }

var errDiskFull = errors.New("disk full")

func (w *failAfter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		k := w.n
		w.n = 0
		return k, errDiskFull
	}
	w.n -= len(p)
	return len(p), nil
}

// TestStringFinishWriteFails: a write error in the middle of a chunked Finish comes back
// as it is, and no worker outlives Finish.
func TestStringFinishWriteFails(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	before := runtime.NumGoroutine()
	for _, at := range []int{0, 100, 50000} {
		b := NewBTreeBuilder[string](BuildOptions{RunEntries: 2000, PageEntries: 8})
		b.chunkEntries = 16
		for i := range 20 {
			ks := make([]string, 1000)
			for j := range ks {
				ks[j] = strconv.FormatUint(r.Uint64(), 16)
			}
			if err := b.Add(ks, uint64(i*1000)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Finish(&failAfter{n: at}); !errors.Is(err, errDiskFull) {
			t.Fatalf("failing at byte %d: Finish returned %v", at, err)
		}
		b.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines after the failed builds, %d before", n, before)
	}
}

// TestStringRangesMonotone: a range function made from a sample sends every pair of keys,
// including keys with bytes the sample never held, to ranges in key order.
func TestStringRangesMonotone(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	alphabets := []string{"ac", "0123456789abcdef", "xyz\x00\xff", "k0"}
	for _, sampleAlpha := range alphabets {
		run := newRun(true, 0, 0, fillArena{})
		var ks []string
		for range 3000 {
			var b strings.Builder
			for range 1 + r.IntN(10) {
				b.WriteByte(sampleAlpha[r.IntN(len(sampleAlpha))])
			}
			ks = append(ks, b.String())
		}
		addToRun(run, ks, 0)
		f := newStringRanges(run)
		probe := func() string {
			var b strings.Builder
			for range r.IntN(10) {
				if r.IntN(3) == 0 {
					b.WriteByte(byte(r.IntN(256))) // most of these the sample never held
				} else {
					b.WriteByte(sampleAlpha[r.IntN(len(sampleAlpha))])
				}
			}
			return b.String()
		}
		for range 200000 {
			a, b := probe(), probe()
			if a > b {
				a, b = b, a
			}
			if ja, jb := f.of([]byte(a)), f.of([]byte(b)); ja > jb || ja < 0 || jb >= f.n {
				t.Fatalf("sample %q: %q in range %d, %q in range %d (of %d)", sampleAlpha, a, ja, b, jb, f.n)
			}
		}
	}
}

// TestStringRunWithUnsampledBytes: a run whose sample misses byte values that its other keys
// hold still comes out sorted (the range function above, through a whole build).
func TestStringRunWithUnsampledBytes(t *testing.T) {
	const n = 1 << 16 // sampled every 4th key
	ks := make([]string, n)
	r := rand.New(rand.NewPCG(5, 5))
	for i := range ks {
		if i%4 == 0 {
			ks[i] = string([]byte{"ac"[r.IntN(2)], "xyz"[r.IntN(3)]})
		} else {
			ks[i] = string([]byte{"abc"[r.IntN(3)], "wxyz"[r.IntN(4)], byte(r.IntN(256))})
		}
	}
	b := NewBTreeBuilder[string](BuildOptions{RunEntries: n})
	defer b.Close()
	b.noCode = true // three bytes of any value fit a key code
	if err := b.Add(ks, 0); err != nil {
		t.Fatal(err)
	}
	var seg bytes.Buffer
	if _, err := b.Finish(&seg); err != nil {
		t.Fatal(err)
	}
	br, err := index.OpenBTree[string](t.Context(), index.BytesReader(seg.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := br.Scan(t.Context(), index.Range[string]{}, func(k string, _ uint64) bool { got = append(got, k); return true }); err != nil {
		t.Fatalf("segment: %v", err)
	}
	slices.Sort(ks)
	if !slices.Equal(got, ks) {
		t.Fatal("the segment's keys are not the input sorted")
	}
}

// TestPackDirectMatchesMoved: a string run packed straight from its arena in two halves
// holds the bytes the pack through range order writes (both leave every range unsorted when
// none is over sortAbove): entry numbers across the halves' seam included.
func TestPackDirectMatchesMoved(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 1))
	for _, n := range []int{1, 2, 3, 1000, 30001} {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = strconv.FormatUint(r.Uint64N(1<<uint(4+r.IntN(60))), 16) + strings.Repeat("~", r.IntN(3))
		}
		var runs [2]*memRun
		var sc [2]sortScratch
		sample := newRun(true, 0, 0, fillArena{})
		addToRun(sample, ks, 0)
		f := newStringRanges(sample)
		for k := range runs {
			runs[k] = newRun(true, 0, 0, fillArena{})
			addToRun(runs[k], ks, 7)
			rc := runs[k].countRanges(&sc[k], f)
			runs[k].rangeAt, runs[k].rangeOff, runs[k].rangeSorted = make([]uint32, f.n+1), make([]uint32, f.n+1), make([]bool, f.n)
			copy(runs[k].rangeAt, rc.first[:f.n+1])
			if k == 0 {
				runs[k].packDirect(&sc[k], f, rc)
			} else {
				runs[k].packMoved(&sc[k], f, rc)
			}
		}
		if !bytes.Equal(runs[0].packed, runs[1].packed) || !slices.Equal(runs[0].rangeOff, runs[1].rangeOff) {
			t.Fatalf("%d keys: packed directly %d bytes, through range order %d; offsets equal: %v",
				n, len(runs[0].packed), len(runs[1].packed), slices.Equal(runs[0].rangeOff, runs[1].rangeOff))
		}
		if slices.Contains(runs[1].rangeSorted, true) {
			t.Fatalf("%d keys: a range was sorted", n)
		}
	}
}

// TestBucketFinishMatchesSerialWriter: a numeric build of bucketed runs, finished bucket by
// bucket in chunks down to one pair, writes the bytes the plain writer makes of the same
// pairs sorted in one piece (prices in cents with ties decided by row id, wide int64 keys,
// row ids ascending and out of order).
func TestBucketFinishMatchesSerialWriter(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 3))
	t.Run("float64-cents", func(t *testing.T) {
		checkBucketFinish(t, r, func() float64 { return float64(r.IntN(1_000_000)) / 100 }, false)
	})
	t.Run("float64-cents-shuffled-ids", func(t *testing.T) {
		checkBucketFinish(t, r, func() float64 { return float64(r.IntN(5000)) / 100 }, true)
	})
	t.Run("int64-wide", func(t *testing.T) {
		checkBucketFinish(t, r, func() int64 { return r.Int64() - 1<<62 }, false)
	})
}

func checkBucketFinish[K index.Key](t *testing.T, r *rand.Rand, key func() K, shuffled bool) {
	const n, per = 30000, 1000
	type pair struct {
		k  K
		id uint64
	}
	var firsts []uint64
	for i := 0; i < n; i += per {
		firsts = append(firsts, uint64(i)+1<<35)
	}
	if shuffled {
		r.Shuffle(len(firsts), func(i, j int) { firsts[i], firsts[j] = firsts[j], firsts[i] })
	}
	var pairs []pair
	var batches [][]K
	for _, f := range firsts {
		ks := make([]K, per)
		for i := range ks {
			ks[i] = key()
			pairs = append(pairs, pair{ks[i], f + uint64(i)})
		}
		batches = append(batches, ks)
	}
	slices.SortFunc(pairs, func(a, b pair) int { return cmp.Or(cmp.Compare(a.k, b.k), cmp.Compare(a.id, b.id)) })
	for _, pages := range []int{5, 1024} {
		want := serialSegment(t, pages, len(pairs), func(i int) (K, uint64) { return pairs[i].k, pairs[i].id })
		for _, chunk := range []int{0, 1, 3 * pages, 4999} {
			b := NewBTreeBuilder[K](BuildOptions{RunEntries: 4000, PageEntries: pages})
			b.chunkEntries = chunk
			for i, ks := range batches {
				if err := b.Add(ks, firsts[i]); err != nil {
					t.Fatal(err)
				}
			}
			if !b.bucketedAfterWait(t) {
				t.Fatal("the build's runs are not all bucketed: the test does not reach finishBuckets")
			}
			var got bytes.Buffer
			if c, err := b.Finish(&got); err != nil || c != uint64(len(pairs)) {
				t.Fatalf("finish: %d, %v", c, err)
			}
			b.Close()
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("pages of %d, chunks of %d: the segment differs from the serial writer's (%d vs %d bytes)", pages, chunk, got.Len(), want.Len())
			}
		}
	}
}

// serialSegment is the segment the plain writer makes of n sorted pairs, pair(i) the i-th.
func serialSegment[K index.Key](t *testing.T, pages, n int, pair func(i int) (K, uint64)) *bytes.Buffer {
	t.Helper()
	var seg bytes.Buffer
	w, err := index.NewBTreeWriter[K](&seg, pages)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := w.Add(pair(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &seg
}

// codedSerialSegment is serialSegment for string keys written as codes of c.
func codedSerialSegment(t *testing.T, c *index.KeyCode, pages, n int, pair func(i int) (string, uint64)) *bytes.Buffer {
	t.Helper()
	var seg bytes.Buffer
	w, err := index.NewBTreeWriter[string](&seg, pages)
	if err != nil {
		t.Fatal(err)
	}
	w.SetKeyCode(c)
	codes := make([]uint64, 1)
	for i := range n {
		k, id := pair(i)
		if !c.EncodeStrings(codes, []string{k}) {
			t.Fatalf("%q does not fit the build's code", k)
		}
		if err := w.AddEncoded(codes, []uint64{id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &seg
}

// bucketedAfterWait seals the run being filled and reports whether Finish will take the
// bucket path.
func (b *BTreeBuilder[K]) bucketedAfterWait(t *testing.T) bool {
	t.Helper()
	if b.cur != nil && b.cur.n > 0 {
		if err := b.seal(); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.wait(); err != nil {
		t.Fatal(err)
	}
	return b.bucketed()
}

// sharedByPrefix must equal commonPrefix for every pair of keys, those shorter than their
// 8-byte prefix (padded with zeros, so "ab" and "ab\x00" have one prefix) and those that agree
// on all 8 bytes included.
func TestSharedByPrefixIsCommonPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	key := func() []byte {
		b := make([]byte, rng.IntN(14))
		for i := range b {
			b[i] = "ab\x00\xff"[rng.IntN(4)]
		}
		return b
	}
	fixed := [][]byte{nil, {}, []byte("ab"), []byte("ab\x00"), []byte("ab\x00c"), []byte("abcdefgh"),
		[]byte("abcdefghi"), []byte("abcdefgh\x00"), []byte("abcdefg"), []byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00")}
	check := func(a, b []byte) {
		want := index.CommonPrefix(a, b)
		if got := sharedByPrefix(stringPrefix(string(a)), stringPrefix(string(b)), a, b); got != want {
			t.Fatalf("sharedByPrefix(%q, %q) = %d, commonPrefix %d", a, b, got, want)
		}
	}
	for _, a := range fixed {
		for _, b := range fixed {
			check(a, b)
		}
	}
	for range 200000 {
		check(key(), key())
	}
}

// TestCommonPrefixMatchesBytewise: the word-at-a-time commonPrefix against a byte loop, for
// keys sharing every prefix length up to 40 and differing in any bit of the next byte, of
// equal and unequal lengths (one a prefix of the other included).
func TestCommonPrefixMatchesBytewise(t *testing.T) {
	bytewise := func(a, b []byte) int {
		i := 0
		for i < len(a) && i < len(b) && a[i] == b[i] {
			i++
		}
		return i
	}
	r := rand.New(rand.NewPCG(3, 5))
	for shared := 0; shared <= 40; shared++ {
		for trial := range 200 {
			a := make([]byte, shared+r.IntN(20))
			for i := range a {
				a[i] = byte(r.IntN(256))
			}
			b := append([]byte(nil), a[:shared]...)
			if shared < len(a) && trial%4 != 0 {
				b = append(b, a[shared]^byte(1<<r.IntN(8))) // differs at shared
			}
			b = append(b, make([]byte, r.IntN(20))...)
			if got, want := index.CommonPrefix(a, b), bytewise(a, b); got != want {
				t.Fatalf("index.CommonPrefix(%x, %x) = %d, want %d", a, b, got, want)
			}
			if got, want := index.CommonPrefix(b, a), bytewise(b, a); got != want {
				t.Fatalf("index.CommonPrefix(%x, %x) = %d, want %d", b, a, got, want)
			}
		}
	}
}
