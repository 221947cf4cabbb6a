package index

import (
	"math/bits"
	"slices"
)

// Numeric runs are not fully sorted in the background: they are split (one stable scatter)
// into bucketCount ranges of the encoded key, the same ranges for every run. A build then
// needs no k-way merge: the entries of bucket j from all runs are gathered and radix-sorted
// while they fit in cache, and buckets come out in key order. This trades the merge's
// unpredictable branches (~40ns a pair over 10 runs) for a few cache-resident radix passes.
const bucketBits = 12
const bucketCount = 1 << bucketBits

// bucketFunc maps an encoded key to its bucket; it is monotonic, so bucket order is key order.
type bucketFunc struct {
	lo    uint64 // lowest key of the first run, >> shift
	shift uint
}

// newBucketFunc spreads the key range of the first run over the buckets. The range is taken
// between the 0.1 and 99.9 percentiles of a sample, not min..max: encoded floats are close
// to logarithmic, so one 0.0 among prices in [0, 1e4) would otherwise put most keys into
// three buckets. Keys outside the range land in the end buckets, which only makes those
// bigger.
func newBucketFunc(keys []uint64) bucketFunc {
	step := max(1, len(keys)/(1<<14))
	var sample []uint64
	for i := 0; i < len(keys); i += step {
		sample = append(sample, keys[i])
	}
	slices.Sort(sample)
	lo, hi := sample[len(sample)/1000], sample[len(sample)-1-len(sample)/1000]
	shift := max(0, bits.Len64(hi-lo)-bucketBits)
	return bucketFunc{lo: lo >> shift, shift: uint(shift)}
}

func (f bucketFunc) of(k uint64) int {
	v := k >> f.shift
	if v < f.lo {
		return 0
	}
	return int(min(v-f.lo, bucketCount-1))
}

// partition reorders r's keys by bucket (stable) and records where each bucket starts; the
// entry numbers move along in r.order.
func (r *memRun) partition(f bucketFunc, sc *sortScratch) {
	var counts [bucketCount + 1]uint32
	for _, k := range r.keys {
		counts[f.of(k)+1]++
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	r.bounds = slices.Clone(counts[:])
	if cap(sc.a) < r.n {
		sc.a = make([]uint64, r.n)
	}
	keys, order := sc.a[:r.n], make([]uint32, r.n)
	for i, k := range r.keys {
		b := f.of(k)
		p := counts[b]
		counts[b]++
		keys[p] = k
		order[p] = uint32(i)
	}
	sc.a = r.keys[:cap(r.keys)] // the old key array is the next run's scratch
	r.keys, r.order = keys, order
}

// bucketSource yields the sorted union of partitioned runs, one bucket at a time.
type bucketSource struct {
	runs      []*memRun
	ascending bool // row ids ascend across and within all runs
	next      int  // next bucket to gather
	keys, tk  []uint64
	ids, ti   []uint64
	pos       int
}

func (s *bucketSource) fill(dst []entry) ([]entry, error) {
	dst = dst[:0]
	for len(dst) < cap(dst) {
		if s.pos == len(s.keys) {
			if s.next == bucketCount {
				break
			}
			s.gather()
			continue
		}
		n := min(cap(dst)-len(dst), len(s.keys)-s.pos)
		for i := s.pos; i < s.pos+n; i++ {
			dst = append(dst, entry{k: s.keys[i], id: s.ids[i]})
		}
		s.pos += n
	}
	return dst, nil
}

// gather collects bucket s.next from every run and sorts it by (key, row id).
func (s *bucketSource) gather() {
	j := s.next
	s.next++
	s.keys, s.ids, s.pos = s.keys[:0], s.ids[:0], 0
	for _, r := range s.runs {
		lo, hi := int(r.bounds[j]), int(r.bounds[j+1])
		s.keys = append(s.keys, r.keys[lo:hi]...)
		for p := lo; p < hi; p++ {
			i := uint32(p)
			if r.order != nil {
				i = r.order[p]
			}
			s.ids = append(s.ids, r.id(i))
		}
	}
	n := len(s.keys)
	if s.ascending && slices.IsSorted(s.keys) {
		return
	}
	s.tk, s.ti = slices.Grow(s.tk[:0], n)[:n], slices.Grow(s.ti[:0], n)[:n]
	radixSort(s.keys, s.ids, s.tk, s.ti)
	if s.ascending {
		return // stable: equal keys kept ascending row ids
	}
	for i := 0; i < n; {
		e := i + 1
		for e < n && s.keys[e] == s.keys[i] {
			e++
		}
		if e-i > 1 {
			slices.Sort(s.ids[i:e])
		}
		i = e
	}
}

// sortedSource yields a numeric run that was in (key, row id) order as added.
type sortedSource struct {
	r   *memRun
	pos int
}

func (s *sortedSource) fill(dst []entry) ([]entry, error) {
	dst = dst[:0]
	for p := s.pos; p < min(s.r.n, s.pos+cap(dst)); p++ {
		dst = append(dst, entry{k: s.r.keys[p], id: s.r.id(uint32(p))})
	}
	s.pos += len(dst)
	return dst, nil
}
