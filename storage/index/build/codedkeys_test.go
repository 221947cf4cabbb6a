package build

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cba1309c/steward/storage/index"
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
			forms[fmt.Sprintf("fixed-%v/width-%d", c.Fixed() >= 0, c.Width())]++
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
				if want, got := index.CommonPrefix(keys[i], keys[j]), c.Shared(codes[i], codes[j]); want != got {
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
			if _, ok := encodeRun(c, runOf([][]byte{bytes.Repeat(keys[0][:min(1, len(keys[0]))], c.MaxLen()+1)}), nil); ok && len(keys[0]) > 0 {
				t.Fatalf("%s: a key of %d bytes coded (at most %d)", name, c.MaxLen()+1, c.MaxLen())
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
	if c := newKeyCode(runOf(words(5000, 9))); c == nil || c.Fixed() >= 0 || c.MaxLen() != 12 {
		t.Fatalf("words of up to 9 letters: code %+v, want the terminated form up to 12", c)
	}
	if c := newKeyCode(runOf(words(5000, 10))); c != nil {
		t.Fatalf("words of up to 10 letters coded (%d of at most 12 symbols): a longer one would end the code", c.MaxLen())
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
