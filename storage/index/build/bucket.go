package build

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

func (f bucketFunc) low(j int) uint64 { return (f.lo + uint64(j)) << f.shift }

// partition reorders r's entries by bucket (stable) and records where each bucket starts.
//
// A key of a middle bucket j is low(j) plus shift bits, so when those bits and the entry
// number fit one word together, bucket j's entries become words (key-low(j))<<idxBits | entry
// number, in r.words; the end buckets, which may hold any key, keep the key itself there and
// their entry numbers in r.endOrder. One array of words instead of keys and entry numbers
// side by side: the entry numbers would be a fresh array of every run, and fresh memory is
// dear here (see deltaKeys). When they miss one word by at most 8 bits (uniform 64-bit keys,
// coded hex strings among them: 52 bits under a bucket, 19 of entry number), the word holds
// the entry number's low idxBits and r.idxHi a byte of the rest: 9 bytes an entry instead of
// the 12 of a key and a uint32 (a 10M-key build holds 30 MiB less, all of it fresh memory,
// and the scatter writes a byte where it wrote four). Runs wider still keep keys and r.order.
//
// The two halves of the run are counted and scattered at once, each on a goroutine: the
// second half's entries of a bucket go after the first half's, so the order is the one a
// single pass makes. The run being filled meanwhile shares the cores: a run's sort keeps up
// with the column's decoding instead of holding it back.
func (r *memRun) partition(f bucketFunc, sc *sortScratch) {
	mid := r.n / 2
	var counts [2][bucketCount + 1]uint32
	both(func() { countBuckets(f, r.keys[:mid], &counts[0]) }, func() { countBuckets(f, r.keys[mid:], &counts[1]) })
	bounds := make([]uint32, bucketCount+1)
	var next [2][bucketCount]uint32 // where each half's next entry of bucket j goes
	for j := range bucketCount {
		next[0][j] = bounds[j]
		next[1][j] = bounds[j] + counts[0][j+1]
		bounds[j+1] = next[1][j] + counts[1][j+1]
	}
	r.bounds = bounds
	if cap(sc.a) < r.n {
		sc.a = make([]uint64, r.n)
	}
	out := sc.a[:r.n]
	sc.a = r.keys[:cap(r.keys)] // the old key array is the next run's scratch
	ib := uint(bits.Len(uint(r.n - 1)))
	const last = bucketCount - 1
	n0, nl := bounds[1], bounds[last+1]-bounds[last]
	var order, ends []uint32
	var idxHi []uint8
	lb := ib // bits of the entry number in a word
	switch {
	case f.shift+ib <= 64:
		ends = make([]uint32, n0+nl)
	case f.shift+ib <= 64+8:
		lb = 64 - f.shift
		idxHi = make([]uint8, r.n)
		ends = make([]uint32, n0+nl)
	default:
		order = make([]uint32, r.n)
	}
	mask := uint64(1)<<lb - 1
	scatter := func(lo, hi int, next *[bucketCount]uint32) {
		for i := lo; i < hi; i++ {
			k := r.keys[i]
			b := f.of(k)
			p := next[b]
			next[b]++
			switch {
			case order != nil: // the same for every entry of the run
				out[p], order[p] = k, uint32(i)
			case b == 0:
				out[p], ends[p] = k, uint32(i)
			case b == last:
				out[p], ends[n0+p-bounds[last]] = k, uint32(i)
			default:
				out[p] = (k-f.low(b))<<lb | uint64(i)&mask
				if idxHi != nil { // the same for every entry of the run
					idxHi[p] = uint8(i >> lb)
				}
			}
		}
	}
	both(func() { scatter(0, mid, &next[0]) }, func() { scatter(mid, r.n, &next[1]) })
	if order != nil {
		r.keys, r.order = out, order
		return
	}
	r.keys, r.words, r.idxHi, r.endOrder, r.idxBits = nil, out, idxHi, ends, lb
}

// entry is the entry number of middle-bucket word w at position p of a partitioned run.
func (r *memRun) entry(w uint64, p uint32) uint32 {
	e := uint32(w & (1<<r.idxBits - 1))
	if r.idxHi != nil {
		e |= uint32(r.idxHi[p]) << r.idxBits
	}
	return e
}

// countBuckets adds the keys of each bucket: counts[j+1] for bucket j.
func countBuckets(f bucketFunc, keys []uint64, counts *[bucketCount + 1]uint32) {
	for _, k := range keys {
		counts[f.of(k)+1]++
	}
}

// both runs a on a goroutine of its own and b on this one, and returns once both are done.
func both(a, b func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a()
	}()
	b()
	<-done
}

// gather copies bucket j of run r (partitioned by f) to keys and its row ids to ids.
func (r *memRun) gather(f bucketFunc, j int, keys, ids []uint64) {
	a, e := r.bounds[j], r.bounds[j+1]
	switch {
	case r.words == nil:
		copy(keys, r.keys[a:e])
		for p, i := range r.order[a:e] {
			ids[p] = r.id(i)
		}
	case j == 0 || j == bucketCount-1:
		copy(keys, r.words[a:e])
		ends := r.endOrder[:r.bounds[1]] // bucket 0's, then the last bucket's
		if j != 0 {
			ends = r.endOrder[r.bounds[1]:]
		}
		for p := range ids[:e-a] {
			ids[p] = r.id(ends[p])
		}
	default:
		low, ib := f.low(j), r.idxBits
		for p, w := range r.words[a:e] {
			keys[p], ids[p] = low+w>>ib, r.id(r.entry(w, a+uint32(p)))
		}
	}
}

// numBlock is a sorted stretch of (key, row id) pairs, as a bucket sort or a run in order
// leaves it. Pair i is (v[i], id(i)), unless packed: then v[i] = (key-keyBase)<<shift | p, and
// the pair is (keyBase + v[i]>>shift, id(p)), p being the pair's position before the sort.
// id(p) is ids[p], or idBase+p when ids is nil (a dense run).
type numBlock struct {
	v       []uint64
	ids     []uint64
	keyBase uint64
	idBase  uint64
	shift   uint
	packed  bool
	// Buffers a bucket sort owns and reuses: gathered keys, row ids and radix scratch.
	bk, bi, bt, bu []uint64
}

func (b *numBlock) len() int { return len(b.v) }

// appendEntries appends pairs from..to-1 to dst.
func (b *numBlock) appendEntries(dst []entry, from, to int) []entry {
	switch {
	case b.packed:
		mask := uint64(1)<<b.shift - 1
		for _, x := range b.v[from:to] {
			dst = append(dst, entry{k: b.keyBase + x>>b.shift, id: b.ids[x&mask]})
		}
	case b.ids != nil:
		ids := b.ids[from:to]
		for i, k := range b.v[from:to] {
			dst = append(dst, entry{k: k, id: ids[i]})
		}
	default:
		id := b.idBase + uint64(from)
		for _, k := range b.v[from:to] {
			dst = append(dst, entry{k: k, id: id})
			id++
		}
	}
	return dst
}

// appendPairs appends the keys and row ids of pairs from..to-1 to sk and ids.
func (b *numBlock) appendPairs(sk, ids []uint64, from, to int) ([]uint64, []uint64) {
	switch {
	case b.packed:
		mask := uint64(1)<<b.shift - 1
		for _, x := range b.v[from:to] {
			sk = append(sk, b.keyBase+x>>b.shift)
			ids = append(ids, b.ids[x&mask])
		}
	case b.ids != nil:
		sk = append(sk, b.v[from:to]...)
		ids = append(ids, b.ids[from:to]...)
	default:
		sk = append(sk, b.v[from:to]...)
		for id := b.idBase + uint64(from); id < b.idBase+uint64(to); id++ {
			ids = append(ids, id)
		}
	}
	return sk, ids
}

// sortedReader yields a numeric run in (key, row id) order as blocks: views of its keys, or
// its packed keys decoded into the block's buffer.
type sortedReader struct {
	r   *memRun
	pos int
	dec deltaDecoder
}

// next sets blk to the next (at most max) pairs; false at the end.
func (s *sortedReader) next(blk *numBlock, max int) bool {
	r := s.r
	n := min(max, r.n-s.pos)
	if n <= 0 {
		return false
	}
	*blk = numBlock{idBase: r.base + uint64(s.pos), bk: blk.bk, bi: blk.bi, bt: blk.bt, bu: blk.bu}
	if r.ids != nil {
		blk.ids = r.ids[s.pos : s.pos+n]
	}
	if r.deltas == nil {
		blk.v = r.keys[s.pos : s.pos+n]
	} else {
		s.dec.d = r.deltas
		blk.v = grow64(&blk.bk, n)
		s.dec.next(blk.v)
	}
	s.pos += n
	return true
}

// bucketSorter sorts one bucket of all partitioned runs at a time.
type bucketSorter struct {
	runs      []*memRun
	f         bucketFunc // how they were partitioned
	ascending bool       // row ids ascend across and within all runs
	counts    [1<<bucketDigit + 1]uint32
	next      [1 << bucketDigit]uint32
}

// bucketDigit is the width of the digit a packed bucket is split on: 2048 write streams and
// counters stay in cache, and a bucket of tens of thousands of keys falls into pieces of a
// few dozen.
const bucketDigit = 11

// sort gathers bucket j of every run into blk and sorts it by (key, row id). Entries of equal
// keys keep their gathered order, which is row id order when ids ascend.
//
// When the bucket's key span and its size fit 64 bits together, each entry becomes one word,
// (key-min)<<pos | position (see numBlock), and the words are split on their top digit (one
// counting pass while gathering, one scatter); the pieces, a few words each and often one
// key, are finished by an insertion sort. The words are distinct, so no sort here can reorder
// equal keys. A middle bucket's keys lie in [low(j), low(j+1)), so its words are made as the
// runs are read (gatherPacked); the end buckets, which may hold any key, are gathered first
// to find their span. Other buckets (too wide, or ids out of order) take a radix sort of keys
// and row ids side by side.
func (s *bucketSorter) sort(j int, blk *numBlock) {
	n := 0
	for _, r := range s.runs {
		n += int(r.bounds[j+1] - r.bounds[j])
	}
	pos := uint(bits.Len(uint(n - 1)))
	if n >= 2 && s.ascending && j > 0 && j < bucketCount-1 && s.f.shift+pos <= 64 {
		s.gatherPacked(j, n, s.f.shift, pos, blk)
		return
	}
	keys, ids := grow64(&blk.bk, n), grow64(&blk.bi, n)
	x := 0
	for _, r := range s.runs {
		m := int(r.bounds[j+1] - r.bounds[j])
		r.gather(s.f, j, keys[x:x+m], ids[x:x+m])
		x += m
	}
	lo, hi, sorted, prev := ^uint64(0), uint64(0), true, uint64(0)
	for _, k := range keys {
		lo, hi = min(lo, k), max(hi, k)
		sorted = sorted && prev <= k
		prev = k
	}
	span := uint(bits.Len64(hi - lo))
	*blk = numBlock{v: keys, ids: ids, bk: blk.bk, bi: blk.bi, bt: blk.bt, bu: blk.bu}
	if n >= 2 && s.ascending && !sorted && span+pos <= 64 {
		s.sortPacked(blk, lo, span, pos)
		return
	}
	if n < 2 || sorted && s.ascending {
		return
	}
	radixSort(keys, ids, grow64(&blk.bt, n), grow64(&blk.bu, n))
	if s.ascending {
		return // stable: equal keys kept ascending row ids
	}
	for i := 0; i < n; {
		e := i + 1
		for e < n && keys[e] == keys[i] {
			e++
		}
		if e-i > 1 {
			slices.Sort(ids[i:e])
		}
		i = e
	}
}

// gatherPacked is sort for middle bucket j (n entries, keys in [low(j), low(j)+2^span)):
// each run's entries become words and are counted on their top digit as they are read, with
// their row ids.
func (s *bucketSorter) gatherPacked(j, n int, span, pos uint, blk *numBlock) {
	v, ids := grow64(&blk.bk, n), grow64(&blk.bi, n)
	w := min(span, bucketDigit)
	top := pos + span - w
	counts := s.counts[:1<<w+1]
	clear(counts)
	low := s.f.low(j)
	x := 0
	for _, r := range s.runs {
		a, e := r.bounds[j], r.bounds[j+1]
		m := int(e - a)
		vs, is := v[x:x+m], ids[x:x+m]
		switch {
		case r.words == nil:
			order := r.order[a:e]
			for p, k := range r.keys[a:e] {
				u := (k-low)<<pos | uint64(x+p)
				vs[p] = u
				counts[u>>top+1]++
				is[p] = r.id(order[p])
			}
		case r.idxHi == nil:
			ib, mask := r.idxBits, uint64(1)<<r.idxBits-1
			for p, wd := range r.words[a:e] {
				u := wd>>ib<<pos | uint64(x+p)
				vs[p] = u
				counts[u>>top+1]++
				is[p] = r.id(uint32(wd & mask))
			}
		default:
			ib, mask := r.idxBits, uint64(1)<<r.idxBits-1
			ws := r.words[a:e]
			hi := r.idxHi[a:e][:len(ws)]
			for p, wd := range ws {
				u := wd>>ib<<pos | uint64(x+p)
				vs[p] = u
				counts[u>>top+1]++
				is[p] = r.id(uint32(wd&mask) | uint32(hi[p])<<ib)
			}
		}
		x += m
	}
	*blk = numBlock{v: v, ids: ids, bk: blk.bk, bi: blk.bi, bt: blk.bt, bu: blk.bu}
	s.scatterPieces(blk, counts, w, top)
	blk.packed, blk.keyBase, blk.shift = true, low, pos
}

// sortPacked is sort for the n keys in blk.v, which lie in [lo, lo+2^span) and fit a word
// each with their position (pos bits).
func (s *bucketSorter) sortPacked(blk *numBlock, lo uint64, span, pos uint) {
	w := min(span, bucketDigit)
	top := pos + span - w
	counts := s.counts[:1<<w+1]
	clear(counts)
	v := blk.v
	for i, k := range v {
		u := (k-lo)<<pos | uint64(i)
		v[i] = u
		counts[u>>top+1]++
	}
	s.scatterPieces(blk, counts, w, top)
	blk.packed, blk.keyBase, blk.shift = true, lo, pos
}

// scatterPieces sorts the distinct words in blk.v, counted on their top digit (w bits from
// bit top: counts[d+1] words have digit d), into blk.bt: one scatter by digit, then an
// insertion sort over the whole, which only moves a word within its piece (the pieces are in
// order); pieces of more than a few words are sorted first, so that it stays linear.
func (s *bucketSorter) scatterPieces(blk *numBlock, counts []uint32, w, top uint) {
	// The running sum is kept in a register: counts[i] += counts[i-1] would wait a store's
	// round trip through memory each step (a third of this function's time, at 2048 digits
	// for a few thousand words).
	most, sum := uint32(0), uint32(0)
	for i, c := range counts {
		most, sum = max(most, c), sum+c
		counts[i] = sum
	}
	next := s.next[:1<<w]
	copy(next, counts)
	v := blk.v
	out := grow64(&blk.bt, len(v))
	for _, u := range v {
		d := u >> top
		out[next[d]] = u
		next[d]++
	}
	if most > 8 {
		for d := range 1 << w {
			if piece := out[counts[d]:counts[d+1]]; len(piece) > 8 {
				slices.Sort(piece) // linear on a piece already in order, the common case of one key
			}
		}
	}
	// One bubble pass first, without a branch: most pieces hold one or two words, and the
	// insertion sort's test of each word against the one before went either way for a third
	// of them (its mispredictions were half of this function's time). It leaves the pieces of
	// two in order, and the insertion sort rarely moves a word.
	if len(out) > 1 {
		hi := out[0]
		for i := 1; i < len(out); i++ {
			u := out[i]
			out[i-1], hi = min(hi, u), max(hi, u)
		}
		out[len(out)-1] = hi
	}
	for i := 1; i < len(out); i++ {
		u := out[i]
		if u >= out[i-1] {
			continue
		}
		k := i
		for ; k > 0 && out[k-1] > u; k-- {
			out[k] = out[k-1]
		}
		out[k] = u
	}
	blk.v = out
}

func grow64(s *[]uint64, n int) []uint64 {
	if cap(*s) < n {
		*s = make([]uint64, n+n/8)
	}
	return (*s)[:n]
}

// bucketSource yields the sorted union of partitioned runs, one bucket at a time.
type bucketSource struct {
	sorter bucketSorter
	next   int // next bucket to gather
	blk    numBlock
	pos    int
}

func newBucketSource(runs []*memRun, f bucketFunc, ascending bool) *bucketSource {
	return &bucketSource{sorter: bucketSorter{runs: runs, f: f, ascending: ascending}}
}

func (s *bucketSource) fill(dst []entry) ([]entry, error) {
	dst = dst[:0]
	for len(dst) < cap(dst) {
		if s.pos == s.blk.len() {
			if s.next == bucketCount {
				break
			}
			s.sorter.sort(s.next, &s.blk)
			s.next, s.pos = s.next+1, 0
			continue
		}
		n := min(cap(dst)-len(dst), s.blk.len()-s.pos)
		dst = s.blk.appendEntries(dst, s.pos, s.pos+n)
		s.pos += n
	}
	return dst, nil
}

// sortedSource yields a numeric run that was in (key, row id) order as added.
type sortedSource struct {
	rd  sortedReader
	blk numBlock
}

func (s *sortedSource) fill(dst []entry) ([]entry, error) {
	if !s.rd.next(&s.blk, cap(dst)) {
		return dst[:0], nil
	}
	return s.blk.appendEntries(dst[:0], 0, s.blk.len()), nil
}
