package index

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// runOf is a sealed string run of keys, as a build fills it.
func runOf(keys [][]byte) *memRun {
	r := newRun(true, len(keys), 0, fillArena{})
	for _, k := range keys {
		r.data = append(r.data, k...)
		r.offs = append(r.offs, uint32(len(r.data)))
	}
	r.n = len(keys)
	return r
}

// TestKeyCodeOrdersLikeBytes: over alphabets of 1 to 128 bytes (NUL and 0xff among them) and
// keys of one length or many (the empty key included), a key code, when the keys fit one,
// orders them as bytes.Compare does, spells each back, and counts shared prefixes as
// commonPrefix; a key with a byte the alphabet lacks, or too long, is refused.
func TestKeyCodeOrdersLikeBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	forms := map[string]int{}
	for _, size := range []int{1, 2, 3, 4, 5, 10, 11, 15, 16, 17, 31, 64, 100, 127, 128} {
		for _, lens := range [][2]int{{0, 3}, {1, 8}, {4, 4}, {8, 8}, {9, 9}, {16, 16}, {0, 64}, {5, 21}} {
			alphabet := r.Perm(256)[:size]
			if size > 1 {
				alphabet[0], alphabet[1] = 0, 255
			}
			keys := make([][]byte, 300)
			for i := range keys {
				k := make([]byte, lens[0]+r.IntN(lens[1]-lens[0]+1))
				for j := range k {
					k[j] = byte(alphabet[r.IntN(size)])
				}
				keys[i] = k
			}
			name := fmt.Sprintf("alphabet-%d/len-%d-%d", size, lens[0], lens[1])
			c := newKeyCode(runOf(keys))
			if c == nil {
				forms["none"]++
				continue
			}
			forms[fmt.Sprintf("fixed-%v/width-%d", c.fixed >= 0, c.width)]++
			codes, ok := encodeRun(c, runOf(keys), nil)
			if !ok {
				t.Fatalf("%s: the run the code was made of does not fit it", name)
			}
			for i := range keys {
				if got := c.AppendKey(nil, codes[i]); !bytes.Equal(got, keys[i]) {
					t.Fatalf("%s: %q spelled back as %q", name, keys[i], got)
				}
				j := r.IntN(len(keys))
				if want, got := bytes.Compare(keys[i], keys[j]), cmpCodes(codes[i], codes[j]); want != got {
					t.Fatalf("%s: %q vs %q compares %d, codes %d", name, keys[i], keys[j], want, got)
				}
				if want, got := commonPrefix(keys[i], keys[j]), c.shared(codes[i], codes[j]); want != got {
					t.Fatalf("%s: %q and %q share %d, codes say %d", name, keys[i], keys[j], want, got)
				}
			}
			missing := -1
			for v := range 256 {
				if !slices.Contains(alphabet, v) {
					missing = v
					break
				}
			}
			if missing >= 0 {
				bad := slices.Clone(keys[0])
				if len(bad) == 0 {
					bad = []byte{0}
				}
				for at := range bad { // each position: keys of 16 bytes are coded eight at a time
					bad := slices.Clone(bad)
					bad[at] = byte(missing)
					if _, ok := encodeRun(c, runOf([][]byte{keys[1], bad}), nil); ok {
						t.Fatalf("%s: %q coded with a byte the alphabet lacks", name, bad)
					}
				}
			}
			if _, ok := encodeRun(c, runOf([][]byte{bytes.Repeat(keys[0][:min(1, len(keys[0]))], c.max+1)}), nil); ok && len(keys[0]) > 0 {
				t.Fatalf("%s: a key of %d bytes coded (at most %d)", name, c.max+1, c.max)
			}
		}
	}
	// Both forms and every fast width were taken, and keys too wide were left uncoded.
	for _, want := range []string{"fixed-true/width-4", "fixed-false/width-1", "fixed-false/width-2", "fixed-false/width-4", "fixed-false/width-7", "none"} {
		if forms[want] == 0 {
			t.Errorf("no alphabet took %s (%v)", want, forms)
		}
	}
}

// TestKeyCodeLeavesHeadroom: the terminated form is taken only while the first run's longest
// key leaves a quarter of a code's symbols spare, so that a longer key later (which would end
// the code and spill every run before it) is unlikely; keys of one length take the fixed form.
func TestKeyCodeLeavesHeadroom(t *testing.T) {
	words := func(n, maxLen int) [][]byte {
		r := rand.New(rand.NewPCG(uint64(n), uint64(maxLen)))
		keys := make([][]byte, n)
		for i := range keys {
			k := make([]byte, 1+r.IntN(maxLen))
			for j := range k {
				k[j] = byte('a' + r.IntN(26))
			}
			keys[i] = k
		}
		keys[0] = bytes.Repeat([]byte("z"), maxLen) // the longest, and every letter is there
		keys[1] = []byte("abcdefghijklmnopqrstuvwxy")[:min(25, maxLen)]
		return keys
	}
	// 26 letters and the end take 5 bits: 12 fit 64 bits, 9 leave a quarter spare.
	if c := newKeyCode(runOf(words(5000, 9))); c == nil || c.fixed >= 0 || c.max != 12 {
		t.Fatalf("words of up to 9 letters: code %+v, want the terminated form up to 12", c)
	}
	if c := newKeyCode(runOf(words(5000, 10))); c != nil {
		t.Fatalf("words of up to 10 letters coded (%d of at most 12 symbols): a longer one would end the code", c.max)
	}
}

func cmpCodes(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestCodedPagesReadAsSpelledOut: a segment of coded pages (format 4's coded form) reads back
// the pairs of the segment the writer makes of the same keys spelled out (front-coded pages),
// page for page, over codes of 1 to 7 bits a symbol, fixed and terminated, pages of 1 to 300
// keys; 16 hex digits a key take fewer bytes coded.
func TestCodedPagesReadAsSpelledOut(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	ctx := context.Background()
	widths := map[uint]bool{}
	forms := map[byte]int{}
	for _, tc := range []struct {
		alphabet string
		lo, hi   int
	}{
		{"a", 0, 40}, {"ab", 0, 20}, {"abc", 1, 20}, {"0123456789", 1, 12}, {"0123456789abcdef", 16, 16},
		{"0123456789abcdef", 0, 9}, {"0123456789-", 10, 10}, {"abcdefghijklmnopqrstuvwxyz", 0, 9}, {"\x00\xff", 0, 24},
		{"", 0, 0}, {string(seq(0, 100)), 0, 6}, {string(seq(1, 128)), 9, 9}, {"abcde", 0, 12}, {string(seq(32, 80)), 0, 7},
	} {
		for _, perPage := range []int{1, 2, 5, 64, 300} {
			keys := make([][]byte, 2000)
			for i := range keys {
				k := make([]byte, tc.lo+r.IntN(tc.hi-tc.lo+1))
				for j := range k {
					k[j] = tc.alphabet[r.IntN(len(tc.alphabet))]
				}
				keys[i] = k
			}
			slices.SortFunc(keys, bytes.Compare)
			c := newKeyCode(runOf(keys))
			if c == nil {
				t.Fatalf("%q: no code", tc.alphabet)
			}
			widths[c.width] = true
			codes, _ := encodeRun(c, runOf(keys), nil)
			var got, want bytes.Buffer
			coded, err := NewBTreeWriter[string](&got, perPage)
			if err != nil {
				t.Fatal(err)
			}
			coded.SetKeyCode(c)
			plain, _ := NewBTreeWriter[string](&want, perPage)
			for i, k := range codes {
				if err := coded.AddEncoded([]uint64{k}, []uint64{uint64(i)}); err != nil {
					t.Fatal(err)
				}
				if err := plain.Add(string(keys[i]), uint64(i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := coded.Close(); err != nil {
				t.Fatal(err)
			}
			if err := plain.Close(); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("%q, %d a page", tc.alphabet, perPage)
			cr, err := OpenBTree[string](ctx, BytesReader(got.Bytes()))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			pr, err := OpenBTree[string](ctx, BytesReader(want.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if len(cr.pages) != len(pr.pages) {
				t.Fatalf("%s: %d pages, spelled out %d", name, len(cr.pages), len(pr.pages))
			}
			for i, p := range cr.pages {
				forms[got.Bytes()[p.off+4]]++ // after the page's count
				if q := pr.pages[i]; p.count != q.count || p.min != q.min || p.max != q.max {
					t.Fatalf("%s: page %d holds %d keys %q..%q, spelled out %d %q..%q", name, i, p.count, p.min, p.max, q.count, q.min, q.max)
				}
			}
			type pair struct {
				k  string
				id uint64
			}
			var cp, pp []pair
			if err := cr.Scan(ctx, Range[string]{}, func(k string, id uint64) bool { cp = append(cp, pair{k, id}); return true }); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if err := pr.Scan(ctx, Range[string]{}, func(k string, id uint64) bool { pp = append(pp, pair{k, id}); return true }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cp, pp) || len(cp) != len(keys) {
				t.Fatalf("%s: the coded segment reads %d pairs, the spelled-out one %d of %d, or they differ", name, len(cp), len(pp), len(keys))
			}
			if tc.lo == 16 && perPage == 300 && got.Len() >= want.Len() {
				t.Fatalf("%s: coded %d bytes, spelled out %d", name, got.Len(), want.Len())
			}
		}
	}
	if forms[keysCoded] == 0 || forms[keysFront] == 0 || len(forms) != 2 {
		t.Errorf("pages by form: %v; want both coded and front-coded pages, and no other", forms)
	}
	for w := uint(1); w <= 7; w++ {
		if !widths[w] {
			t.Errorf("no code of width %d was written (%v)", w, widths)
		}
	}
}

// seq is the bytes from lo to hi.
func seq(lo, hi int) []byte {
	var b []byte
	for v := lo; v <= hi; v++ {
		b = append(b, byte(v))
	}
	return b
}

// FuzzStringBuild: any string keys, in runs of a few, make the segment the plain writer makes
// of them sorted, coded or not, a code ended by a later run or not. Keys come length-prefixed.
func FuzzStringBuild(f *testing.F) {
	f.Add([]byte("\x02ab\x03abc\x00\x02zz\x010"), uint8(3), uint8(2))
	f.Add([]byte("\x0201\x0210\x0211\x0200\x03\xff\x00a\x0201"), uint8(1), uint8(1))
	f.Add([]byte("\x100123456789abcdef\x10fedcba9876543210\x100000000000000000\x01g"), uint8(2), uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, runEntries, pageEntries uint8) {
		var keys []string
		for len(data) > 0 {
			l := min(int(data[0])%32, len(data)-1)
			keys = append(keys, string(data[1:1+l]))
			data = data[1+l:]
		}
		type pair struct {
			k  string
			id uint64
		}
		pairs := make([]pair, len(keys))
		for i, k := range keys {
			pairs[i] = pair{k, uint64(i)}
		}
		slices.SortFunc(pairs, func(a, b pair) int {
			if c := strings.Compare(a.k, b.k); c != 0 {
				return c
			}
			return cmp.Compare(a.id, b.id)
		})
		pages := 1 + int(pageEntries)%9
		want := serialSegment(t, pages, len(pairs), func(i int) (string, uint64) { return pairs[i].k, pairs[i].id })
		b := NewBTreeBuilder[string](BuildOptions{RunEntries: 1 + int(runEntries)%50, PageEntries: pages, TempDir: t.TempDir()})
		defer b.Close()
		for i := 0; i < len(keys); i += 7 {
			if err := b.Add(keys[i:min(i+7, len(keys))], uint64(i)); err != nil {
				t.Fatal(err)
			}
		}
		var got bytes.Buffer
		if n, err := b.Finish(&got); err != nil || n != uint64(len(keys)) {
			t.Fatalf("finish: %d pairs, %v; want %d", n, err, len(keys))
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("segment differs from the serial writer's (code %v)", b.code != nil)
		}
	})
}

// TestCodedKeysRefuseMalformedCodes: format 4's coded form reads back keys a writer made, and
// refuses, as corruption, a code no writer makes (no symbol width of 1 to 7, bytes out of
// order or too many for the width, a fixed length of 0 or past 64 bits, a shift past 63, a
// header cut short) and numbers no code makes (a symbol outside the alphabet, bits past a
// key's end, a number the shift pushes past 64 bits): each key has one spelling.
func TestCodedKeysRefuseMalformedCodes(t *testing.T) {
	// width, fixed, the alphabet, shift, then the numbers
	page := func(width, fixed byte, syms string, shift byte, codes ...uint64) []byte {
		b := append([]byte{width, fixed, byte(len(syms))}, syms...)
		b = append(b, shift)
		b, _ = appendNumKeys(b, codes, nil)
		return b
	}
	var errBad = errors.New("bad")
	read := func(b []byte, n int) ([]string, error) {
		keys, rest, _, err := decodeCodedKeys[string](b, n, nil, nil, func(string) error { return errBad })
		if err == nil && len(rest) != 0 {
			t.Fatalf("%d bytes left after the keys", len(rest))
		}
		return keys, err
	}
	// "ab" terminated at 2 bits a symbol: a=1, b=2; "" is 0.
	ab := func(s string) uint64 {
		var k uint64
		for i, c := range []byte(s) {
			k |= uint64(c-'a'+1) << (62 - 2*i)
		}
		return k
	}
	good := page(2, codeTerminated, "ab", 0, ab(""), ab("a"), ab("ab"), ab("b"), ab("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"))
	if keys, err := read(good, 5); err != nil || !slices.Equal(keys, []string{"", "a", "ab", "b", strings.Repeat("b", 32)}) {
		t.Fatalf("a well-formed page: %q, %v", keys, err)
	}
	shifted := page(2, codeTerminated, "ab", 60, ab("a")>>60, ab("b")>>60)
	if keys, err := read(shifted, 2); err != nil || !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("a shifted page: %q, %v", keys, err)
	}
	fixed := page(4, 3, "xyz", 0, 0, 1<<52|2<<56, 2<<60|2<<56|2<<52)
	if keys, err := read(fixed, 3); err != nil || !slices.Equal(keys, []string{"xxx", "xzy", "zzz"}) {
		t.Fatalf("a fixed-length page: %q, %v", keys, err)
	}
	for name, bad := range map[string]struct {
		b []byte
		n int
	}{
		"width 0":                    {page(0, codeTerminated, "", 0, 0), 1},
		"width 8":                    {page(8, 3, "ab", 0, 0), 1},
		"bytes out of order":         {page(2, codeTerminated, "ba", 0, 0), 1},
		"bytes repeated":             {page(2, codeTerminated, "aa", 0, 0), 1},
		"too many bytes":             {page(2, codeTerminated, "abcd", 0, 0), 1},
		"too many bytes, fixed":      {page(1, 3, "abc", 0, 0), 1},
		"fixed length 0":             {page(4, 0, "ab", 0, 0), 1},
		"fixed length past 64 bits":  {page(4, 17, "ab", 0, 0), 1},
		"shift 64":                   {page(2, codeTerminated, "ab", 64, 0), 1},
		"header cut short":           {[]byte{2, codeTerminated, 2, 'a'}, 1},
		"no shift":                   {[]byte{2, codeTerminated, 2, 'a', 'b'}, 1},
		"numbers cut short":          {page(2, codeTerminated, "ab", 0, ab("a"), ab("b"))[:7], 2},
		"symbol outside":             {page(2, codeTerminated, "ab", 0, 3<<62), 1},
		"symbol outside, fixed":      {page(4, 3, "xyz", 0, 3<<60), 1},
		"bits after the terminator":  {page(2, codeTerminated, "ab", 0, 1<<62|1<<58), 1},
		"bits past a fixed key":      {page(4, 3, "xyz", 0, 1), 1},
		"number past 64 bits":        {page(2, codeTerminated, "ab", 60, 1<<4), 1},
		"bits past a fixed key (lo)": {page(7, 9, string(seq(1, 100)), 0, 1<<0), 1},
	} {
		if keys, err := read(bad.b, bad.n); !errors.Is(err, errBad) {
			t.Errorf("%s: read %q, %v; want it refused", name, keys, err)
		}
	}
}
