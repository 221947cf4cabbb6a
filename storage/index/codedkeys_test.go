package index

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"

	"errors"
	"slices"
	"strings"
	"testing"
)

// seq is the bytes from lo to hi.
func seq(lo, hi int) []byte {
	var b []byte
	for v := lo; v <= hi; v++ {
		b = append(b, byte(v))
	}
	return b
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
			c, codes := codeOf(keys)
			if c == nil {
				t.Fatalf("%q: no code", tc.alphabet)
			}
			widths[c.width] = true
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

// codeOf is the key code of sorted keys, and their codes.
func codeOf(keys [][]byte) (*KeyCode, []uint64) {
	var data []byte
	offs := []uint32{0}
	for _, k := range keys {
		data = append(data, k...)
		offs = append(offs, uint32(len(data)))
	}
	c := KeyCodeOf(data, offs)
	codes := make([]uint64, len(keys))
	if c == nil || !c.EncodeBytes(codes, data, offs) {
		return nil, nil
	}
	return c, codes
}
