package build

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// sliceSource yields sorted entries in blocks of at most cap(dst), reusing nothing.
type sliceSource struct{ es []entry }

func (s *sliceSource) fill(dst []entry) ([]entry, error) {
	n := copy(dst[:cap(dst)], s.es)
	s.es = s.es[n:]
	return dst[:n], nil
}

// TestMergeMatchesSort merges random, clustered, interleaved and empty sources, with string
// keys that tie on their 8-byte prefix, and compares the stream with one sort of everything.
func TestMergeMatchesSort(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	gen := map[string]func(src, i int) entry{
		"random":   func(_, _ int) entry { return entry{k: r.Uint64N(1000)} },
		"clusters": func(src, i int) entry { return entry{k: uint64(src*1_000_000 + i)} },
		"strings": func(_, _ int) entry {
			s := fmt.Sprintf("prefix%02d-%d", r.IntN(30), r.IntN(50))
			return entry{k: stringPrefix(s), s: s}
		},
	}
	for name, g := range gen {
		for _, k := range []int{1, 2, 3, 5, 8, 20, 33} {
			t.Run(fmt.Sprintf("%s/%d", name, k), func(t *testing.T) {
				var all []entry
				srcs := make([]source, k)
				id := uint64(0)
				for s := range k {
					n := r.IntN(3 * mergeBlock)
					if s%4 == 3 {
						n = 0 // an empty source
					}
					es := make([]entry, n)
					for i := range es {
						es[i] = g(s, i)
						es[i].id = id
						id++
					}
					slices.SortFunc(es, cmpEntry)
					all = append(all, es...)
					srcs[s] = &sliceSource{es: es}
				}
				slices.SortFunc(all, cmpEntry)
				var got []entry
				batches := 0
				err := merge(srcs, 1000, func(es []entry) error {
					if len(es) == 0 || len(es) > 1000 {
						t.Fatalf("batch of %d entries", len(es))
					}
					batches++
					got = append(got, es...)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(all) {
					t.Fatalf("%d entries merged, want %d", len(got), len(all))
				}
				for i := range all {
					if got[i] != all[i] {
						t.Fatalf("entry %d: %+v, want %+v", i, got[i], all[i])
					}
				}
			})
		}
	}
}

func cmpEntry(a, b entry) int {
	switch {
	case lessEntry(&a, &b):
		return -1
	case lessEntry(&b, &a):
		return 1
	}
	return 0
}
