package index

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

func TestSymbolsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, symbols := range []int{1, 2, 3, 4, 5, 8, 9, 16, 33, 64, 100, 128, 129, 200, 256} {
		alphabet := r.Perm(256)[:symbols]
		for _, n := range []int{0, 1, 2, 3, 7, 8, 9, 31, 32, 33, 1000, 10_000} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(alphabet[r.IntN(symbols)])
			}
			b := appendSymbols([]byte("head"), src)
			b = append(b, "tail"...)
			if string(b[:4]) != "head" {
				t.Fatal("appendSymbols overwrote what came before")
			}
			coded := b[4:]
			want := uint(rawSymbols)
			if d := distinct(src); d > 0 && d <= 128 {
				want = symbolWidth(d)
			}
			if got := uint(coded[0]); got != want {
				t.Fatalf("%d symbols, %d bytes: width %d, want %d", symbols, n, got, want)
			}
			dst := make([]byte, n)
			rest, ok := decodeSymbols(coded, dst)
			if !ok || !bytes.Equal(dst, src) || string(rest) != "tail" {
				t.Fatalf("%d symbols, %d bytes: ok %v, equal %v, rest %q", symbols, n, ok, bytes.Equal(dst, src), rest)
			}
			if w := uint(coded[0]); w < rawSymbols && len(coded)-len("tail") != 2+distinct(src)+packedLen(n, w) {
				t.Fatalf("%d symbols, %d bytes: %d coded bytes", symbols, n, len(coded)-4)
			}
		}
	}
}

func distinct(b []byte) int {
	var seen [256]bool
	n := 0
	for _, c := range b {
		if !seen[c] {
			seen[c], n = true, n+1
		}
	}
	return n
}

// Malformed codings are refused, never decoded into wrong bytes.
func TestSymbolsMalformed(t *testing.T) {
	good := appendSymbols(nil, []byte("abcabcab")) // width 2, symbols a b c
	dst := make([]byte, 8)
	if _, ok := decodeSymbols(good, dst); !ok || string(dst) != "abcabcab" {
		t.Fatalf("good coding: %v %q", ok, dst)
	}
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":          nil,
		"code past last": mutate(func(b []byte) []byte { b[5] |= 3; return b }), // code 3 of 3 symbols
		"padding set":    mutate(func(b []byte) []byte { b[len(b)-1] |= 0x80; return b }),
		"unsorted":       mutate(func(b []byte) []byte { b[2], b[3] = b[3], b[2]; return b }),
		"repeated":       mutate(func(b []byte) []byte { b[3] = b[2]; return b }),
		"wider":          mutate(func(b []byte) []byte { b[0] = 3; return b }),
		"width 0":        mutate(func(b []byte) []byte { b[0] = 0; return b }),
		"width 9":        mutate(func(b []byte) []byte { b[0] = 9; return b }),
		"too many":       mutate(func(b []byte) []byte { b[1] = 200; return b }),
		"truncated":      good[:len(good)-1],
		"no symbols":     good[:3],
		"raw truncated":  append([]byte{rawSymbols}, "abc"...),
	}
	for name, b := range cases {
		if _, ok := decodeSymbols(b, make([]byte, 8)); ok {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzSymbols(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), uint16(16))
	f.Add(appendSymbols(nil, []byte("hello, world")), uint16(12))
	f.Add([]byte{rawSymbols, 1, 2, 3}, uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, n uint16) {
		b := appendSymbols(nil, data)
		dst := make([]byte, len(data))
		if rest, ok := decodeSymbols(b, dst); !ok || len(rest) != 0 || !bytes.Equal(dst, data) {
			t.Fatalf("round trip: ok %v, rest %d, equal %v", ok, len(rest), bytes.Equal(dst, data))
		}
		// Arbitrary bytes as a coding: refused or decoded, never a panic.
		out := make([]byte, n%4096)
		if rest, ok := decodeSymbols(data, out); ok && len(rest) > len(data) {
			t.Fatal("rest longer than the input")
		}
	})
}

// A page's suffixes of the bench's name column: 1024 keys of 16 random hex digits, ~10 bytes
// of each past the prefix it shares.
func hexSuffixes() []byte {
	r := rand.New(rand.NewPCG(6, 6))
	const digits = "0123456789abcdef"
	src := make([]byte, 10*1024)
	for i := range src {
		src[i] = digits[r.IntN(16)]
	}
	return src
}

func BenchmarkAppendSymbols(b *testing.B) {
	src := hexSuffixes()
	var out []byte
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		out = appendSymbols(out[:0], src)
	}
}

func BenchmarkDecodeSymbols(b *testing.B) {
	src := hexSuffixes()
	coded := appendSymbols(nil, src)
	dst := make([]byte, len(src))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, ok := decodeSymbols(coded, dst); !ok {
			b.Fatal("not decoded")
		}
	}
}
