package build

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"math/bits"
	"slices"
	"sort"
	"strings"

	"github.com/cba1309c/steward/storage/index"
)

// memRun is one batch of a BTREE build held in memory, sorted by (key, row id) once sealed.
// Numeric keys are kept as sortKey encodings; strings are packed into one arena, so a run of
// a million short strings is three allocations, not a million.
type memRun struct {
	n    int
	base uint64   // row id of entry i is base+i, unless ids is set
	ids  []uint64 // explicit row ids, only once the input stopped being one dense sequence
	// idsAscending: every row id is above the one before, so a stable sort by key alone
	// leaves (key, row id) order.
	idsAscending bool
	lastID       uint64

	keys []uint64 // numeric keys; sorted once the run is sealed
	// deltas holds a sorted run's keys instead of keys, when they pack (see deltaKeys).
	deltas *deltaKeys
	data   []byte   // string keys, concatenated, while the run fills
	offs   []uint32 // string entry i is data[offs[i]:offs[i+1]], while the run fills
	rid    []uint16 // string entry i is in range rid[i], when recorded for every entry (noteRanges)
	// packed holds a sealed run's strings range by range, front-coded with their entry
	// numbers (see packer, pack): Finish reads one range of every run at a time.
	packed []byte
	// rangeAt, rangeOff: a packed run's entries of key range j (see stringRanges, one
	// function for every run of a build) are the positions [rangeAt[j]:rangeAt[j+1]], packed
	// at packed[rangeOff[j]:rangeOff[j+1]]; each range's first key is coded whole, so a range
	// decodes by itself. rangeSorted[j]: range j is in (key, row id) order; otherwise its
	// entries are in the order they were added, their entry numbers delta-coded (see pack).
	rangeAt, rangeOff []uint32
	rangeSorted       []bool

	// order maps position to entry once keys were reordered; nil when they were not.
	order []uint32
	// words, idxHi, endOrder, idxBits: a partitioned run's entries packed (see partition).
	words    []uint64
	idxHi    []uint8
	endOrder []uint32
	idxBits  uint
	// bounds: a numeric run's bucket j is keys (or words) [bounds[j]:bounds[j+1]] (see partition).
	bounds []uint32
	sorted bool // a numeric run that was in (key, row id) order as added
	// coded: a string run whose keys were coded as they came (BTreeBuilder.addCoded), in keys.
	coded   bool
	firstID uint64
}

// newRun allocates a run for capacity entries (and dataCap bytes of strings), reusing the
// arena or key array given when it is large enough.
func newRun(str bool, capacity, dataCap int, reuse fillArena) *memRun {
	r := &memRun{idsAscending: true}
	if str {
		r.offs, r.data, r.rid = reuse.offs, reuse.data, reuse.rid[:0]
		if cap(r.offs) < capacity+1 {
			r.offs = make([]uint32, 1, capacity+1)
		}
		if cap(r.data) < dataCap {
			r.data = make([]byte, 0, dataCap)
		}
		r.offs, r.data = r.offs[:1], r.data[:0]
		r.offs[0] = 0
	} else if cap(reuse.keys) >= capacity {
		r.keys = reuse.keys[:0]
	} else {
		r.keys = make([]uint64, 0, capacity)
	}
	return r
}

// bytes is the memory the run holds.
func (r *memRun) bytes() int64 {
	d := 0
	if r.deltas != nil {
		d = cap(r.deltas.words)
	}
	return int64(8*(cap(r.keys)+d) + cap(r.data) + 4*cap(r.offs) + cap(r.packed) + 8*cap(r.ids) + 4*cap(r.order) + 4*cap(r.bounds) + 8*cap(r.words) + cap(r.idxHi) + 4*cap(r.endOrder) + 4*(cap(r.rangeAt)+cap(r.rangeOff)) + cap(r.rangeSorted) + 2*cap(r.rid))
}

// maxArena keeps string offsets within uint32.
const maxArena = 1<<32 - 1

// add appends keys at row ids first, first+1, ...
func addToRun[K index.Key](r *memRun, keys []K, first uint64) {
	r.addIDs(len(keys), first)
	switch ks := any(keys).(type) {
	case []int64:
		dst := r.extend(len(ks))
		for i, k := range ks {
			dst[i] = index.SortKeyInt64(k)
		}
	case []float64:
		dst := r.extend(len(ks))
		for i, k := range ks {
			dst[i] = index.SortKeyFloat64(k)
		}
	case []string:
		for _, k := range ks {
			r.data = append(r.data, k...)
			r.offs = append(r.offs, uint32(len(r.data)))
		}
	}
}

// extend grows r.keys by n and returns the new part.
func (r *memRun) extend(n int) []uint64 {
	at := len(r.keys)
	r.keys = slices.Grow(r.keys, n)[:at+n]
	return r.keys[at:]
}

// addBytesToRun appends the len(offs)-1 string keys data[offs[i]:offs[i+1]] at row ids first,
// first+1, ... into the run's arena: one copy of the bytes, no string per key.
func addBytesToRun(r *memRun, data []byte, offs []uint32, first uint64) {
	n := len(offs) - 1
	r.addIDs(n, first)
	lo, hi := offs[0], offs[n]
	at := uint32(len(r.data))
	r.data = append(r.data, data[lo:hi]...)
	for _, o := range offs[1:] {
		r.offs = append(r.offs, at+(o-lo))
	}
}

// spellOut turns a coded run being filled into a string run: its keys, spelled out, become
// its arena.
func (r *memRun) spellOut(c *index.KeyCode) {
	r.offs = make([]uint32, 1, cap(r.keys)+1)
	for _, k := range r.keys {
		r.data = c.AppendKey(r.data, k)
		r.offs = append(r.offs, uint32(len(r.data)))
	}
	r.keys, r.coded = nil, false
}

// addIDs accounts for n keys at row ids first, first+1, ...
func (r *memRun) addIDs(n int, first uint64) {
	if r.n == 0 {
		r.base, r.firstID = first, first
	} else if r.ids == nil && first != r.base+uint64(r.n) {
		r.ids = make([]uint64, r.n, max(2*r.n, r.n+n))
		for i := range r.ids {
			r.ids[i] = r.base + uint64(i)
		}
	}
	if r.n > 0 && first <= r.lastID {
		r.idsAscending = false
	}
	if r.ids != nil {
		for i := range n {
			r.ids = append(r.ids, first+uint64(i))
		}
	}
	r.n += n
	r.lastID = first + uint64(n) - 1
}

// firstKey and lastKey are a sorted numeric run's bounds.
func (r *memRun) firstKey() uint64 {
	if r.deltas != nil {
		return r.deltas.first
	}
	return r.keys[0]
}

func (r *memRun) lastKey() uint64 {
	if r.deltas != nil {
		return r.deltas.last
	}
	return r.keys[r.n-1]
}

func (r *memRun) id(i uint32) uint64 {
	if r.ids != nil {
		return r.ids[i]
	}
	return r.base + uint64(i)
}

func (r *memRun) str(i uint32) string { return arenaString(r.data[r.offs[i]:r.offs[i+1]]) }

// sortScratch is reused by every run sort of one build (they run one at a time).
type sortScratch struct {
	a, b []uint64
	o    []uint32
	// A string run's sort: its bytes in range order (or its encoding, when it was in order),
	// each entry's offset there, and one range's prefixes and entries.
	p, p2  []byte
	q      []uint32
	rid    []uint16 // each entry's range
	lo, hi rangeScratch
}

func (sc *sortScratch) grow32(s *[]uint32, n int) {
	if cap(*s) < n {
		*s = make([]uint32, n)
	}
}

// bytes is the scratch's memory.
func (sc *sortScratch) bytes() int64 {
	return int64(8*(cap(sc.a)+cap(sc.b))+4*(cap(sc.o)+cap(sc.q))+2*cap(sc.rid)+cap(sc.p)+cap(sc.p2)) + sc.lo.bytes() + sc.hi.bytes()
}

// sortStrings packs the run (see pack) range by range of f (the build's one range function).
// A run in order is packed as it is. Otherwise the strings are first moved into their ranges
// (reading the arena in order, one write stream per range), then each range is packed: as it
// came when it is small (Finish sorts one range of all runs at once, and sorting it here too
// would sort every key twice), sorted when it is large (see sortAbove).
func (r *memRun) sortStrings(sc *sortScratch, f *stringRanges) {
	sorted := true
	for i := 1; i < r.n && sorted; i++ {
		c := strings.Compare(r.str(uint32(i-1)), r.str(uint32(i)))
		sorted = c < 0 || (c == 0 && r.idsAscending)
	}
	if sorted {
		r.rangeAt, r.rangeOff, r.rangeSorted = make([]uint32, f.n+1), make([]uint32, f.n+1), make([]bool, f.n)
		for j := range r.rangeSorted {
			r.rangeSorted[j] = true
		}
		pk := packer{p: sc.p[:0]}
		// j: the range of the key before (f is monotone, so j never goes back); the ranges
		// are recorded when noteRanges found them as the run filled.
		j, recorded := -1, len(r.rid) == r.n
		for i := range uint32(r.n) {
			s := r.data[r.offs[i]:r.offs[i+1]]
			at := 0
			if recorded {
				at = int(r.rid[i])
			} else {
				at = f.of(s)
			}
			for j < at {
				j++
				r.rangeAt[j], r.rangeOff[j] = i, uint32(len(pk.p))
				pk.prev = nil
			}
			pk.add(s, i)
		}
		for j < f.n {
			j++
			r.rangeAt[j], r.rangeOff[j] = uint32(r.n), uint32(len(pk.p))
		}
		sc.p = pk.p
		r.packed = bytes.Clone(pk.p)
		r.data, r.offs, r.order, r.rid = nil, nil, nil, nil
		return
	}
	r.sortByRange(sc, f)
}

// sortByRange is sortStrings for a run out of order: one pass finds each entry's range, then
// the run is packed directly when none of its ranges is to be sorted (packDirect), else by
// moving the entries into range order first (packMoved).
func (r *memRun) sortByRange(sc *sortScratch, f *stringRanges) {
	rc := r.countRanges(sc, f)
	r.rangeAt, r.rangeOff, r.rangeSorted = make([]uint32, f.n+1), make([]uint32, f.n+1), make([]bool, f.n)
	copy(r.rangeAt, rc.first[:f.n+1])
	big := false
	for j := range f.n {
		big = big || rc.first[j+1]-rc.first[j] > sortAbove
	}
	if big {
		r.packMoved(sc, f, rc)
	} else {
		r.packDirect(sc, f, rc)
	}
	r.data, r.offs, r.order, r.rid = nil, nil, nil, nil
}

// rangeCounts is what countRanges learns of a run: first[j] is the first entry of range j
// in range order, at[j] where its bytes start; half[k] counts the first (k=0) and the second
// half of the entries as added; rid[i] is entry i's range.
type rangeCounts struct {
	first, at [stringRangeCount + 1]uint32
	mid       uint32 // the second half starts here
	half      [2]packHalf
	rid       []uint16
}

type packHalf struct {
	count, size [stringRangeCount]uint32 // the half's entries of range j, their key bytes
	bound       [stringRangeCount]uint32 // the most bytes they pack into
	last        [stringRangeCount]int32  // the half's last entry of range j, -1 if none
}

// countRanges counts the run's ranges, in two halves at once. Each entry's range comes from
// r.rid when the run recorded them as it filled, else it is found here (into sc.rid).
func (r *memRun) countRanges(sc *sortScratch, f *stringRanges) *rangeCounts {
	n := uint32(r.n)
	rc := &rangeCounts{mid: n / 2, rid: r.rid}
	find := len(r.rid) != r.n
	if find {
		if cap(sc.rid) < r.n {
			sc.rid = make([]uint16, r.n)
		}
		rc.rid = sc.rid[:n]
	}
	idLen := uint32(uvarintLen(uint64(n)))
	count := func(h *packHalf, lo, hi uint32) {
		for j := range h.last {
			h.last[j] = -1
		}
		for i := lo; i < hi; i++ {
			s := r.data[r.offs[i]:r.offs[i+1]]
			if find {
				rc.rid[i] = uint16(f.of(s))
			}
			j, l := rc.rid[i], uint32(len(s))
			h.count[j]++
			h.size[j] += l
			h.bound[j] += l + 2*uint32(uvarintLen(uint64(l))) + idLen
			h.last[j] = int32(i)
		}
	}
	done := make(chan struct{})
	go func() {
		count(&rc.half[1], rc.mid, n)
		close(done)
	}()
	count(&rc.half[0], 0, rc.mid)
	<-done
	for j := range stringRangeCount {
		rc.first[j+1] = rc.first[j] + rc.half[0].count[j] + rc.half[1].count[j]
		rc.at[j+1] = rc.at[j] + rc.half[0].size[j] + rc.half[1].size[j]
	}
	return rc
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// packDirect packs every range as its entries came (see pack), straight from the arena in one
// pass and in two halves at once: each half writes its entries of range j into a region of
// their own, sized by countRanges, and the regions are joined in range order after. The
// second half starts each range from the key and entry number the first half ended it with,
// so the bytes are the ones a single pass would write.
func (r *memRun) packDirect(sc *sortScratch, f *stringRanges, rc *rangeCounts) {
	var start [2][stringRangeCount]uint32
	size := uint32(0)
	for k := range 2 {
		for j := range f.n {
			start[k][j] = size
			size += rc.half[k].bound[j]
		}
	}
	if uint32(cap(sc.p)) < size {
		sc.p = make([]byte, size)
	}
	buf := sc.p[:size]
	var end [2][stringRangeCount]uint32
	done := make(chan struct{})
	go func() {
		r.packHalf(buf, rc.rid, rc.mid, uint32(r.n), &rc.half[0], start[1], &end[1])
		done <- struct{}{}
	}()
	r.packHalf(buf, rc.rid, 0, rc.mid, nil, start[0], &end[0])
	<-done
	total := uint32(0)
	for j := range f.n {
		r.rangeOff[j] = total
		total += end[0][j] - start[0][j] + end[1][j] - start[1][j]
	}
	r.rangeOff[f.n] = total
	// The ranges are moved together in two halves at once (a quarter of a run's packing
	// when one goroutine did it): the second from the range where half the bytes are behind.
	packed := make([]byte, total)
	mid := sort.Search(f.n, func(j int) bool { return r.rangeOff[j] >= total/2 })
	compact := func(lo, hi int) {
		for j := lo; j < hi; j++ {
			p := r.rangeOff[j]
			p += uint32(copy(packed[p:], buf[start[0][j]:end[0][j]]))
			copy(packed[p:], buf[start[1][j]:end[1][j]])
		}
	}
	go func() {
		compact(mid, f.n)
		done <- struct{}{}
	}()
	compact(0, mid)
	<-done
	r.packed = packed
}

// packHalf packs entries lo..hi-1 into buf, range j's from at[j] on, and sets end[j] to
// where they end. before, if set, is the half before: its last entry of each range is the
// one each range here follows.
func (r *memRun) packHalf(buf []byte, rid []uint16, lo, hi uint32, before *packHalf, at [stringRangeCount]uint32, end *[stringRangeCount]uint32) {
	var prev [stringRangeCount][]byte
	var last [stringRangeCount]uint32
	if before != nil {
		for j, e := range before.last {
			if e >= 0 {
				prev[j], last[j] = r.data[r.offs[e]:r.offs[e+1]], uint32(e)
			}
		}
	}
	for i := lo; i < hi; i++ {
		j, s := rid[i], r.data[r.offs[i]:r.offs[i+1]]
		shared := index.CommonPrefix(prev[j], s)
		p := at[j]
		p += uint32(binary.PutUvarint(buf[p:], uint64(shared)))
		p += uint32(binary.PutUvarint(buf[p:], uint64(len(s)-shared)))
		p += uint32(copy(buf[p:], s[shared:]))
		p += uint32(binary.PutUvarint(buf[p:], uint64(i-last[j])))
		at[j], prev[j], last[j] = p, s, i
	}
	*end = at
}

// packMoved moves the run's entries into range order (reading the arena in order, one write
// stream per range), then packs the ranges in two halves at once (see pack).
func (r *memRun) packMoved(sc *sortScratch, f *stringRanges, rc *rangeCounts) {
	n := uint32(r.n)
	first, at := rc.first, rc.at
	sc.grow32(&sc.o, r.n)
	sc.grow32(&sc.q, r.n)
	if cap(sc.p) < len(r.data) {
		sc.p = make([]byte, len(r.data))
	}
	m := movedRun{r: r, bytes: sc.p[:len(r.data)], num: sc.o[:n], off: sc.q[:n]}
	next, end := first, at
	for i := range n {
		s := r.data[r.offs[i]:r.offs[i+1]]
		j := rc.rid[i]
		e := next[j]
		next[j]++
		m.num[e], m.off[e] = i, end[j]
		end[j] += uint32(copy(m.bytes[end[j]:], s))
	}
	// Split the ranges where half the entries are behind.
	split := 0
	for split < stringRangeCount && first[split+1] <= n/2 {
		split++
	}
	// The arena's bytes are all moved: the first half is encoded into the arena, the second
	// into scratch, and both are copied out together.
	done := make(chan []byte, 1)
	go func() { done <- m.pack(&sc.hi, first[:], split, f.n, sc.p2[:0], r.rangeOff, r.rangeSorted) }()
	lo := m.pack(&sc.lo, first[:], 0, split, r.data[:0], r.rangeOff, r.rangeSorted)
	hi := <-done
	sc.p2 = hi
	for j := split; j < f.n; j++ {
		r.rangeOff[j] += uint32(len(lo))
	}
	r.rangeOff[f.n] = uint32(len(lo) + len(hi))
	r.packed = append(append(make([]byte, 0, len(lo)+len(hi)), lo...), hi...)
}

// movedRun is a string run's entries laid out by range, one after the other: entry e (its
// number in the run: num[e]) is bytes[off[e]:off[e+1]].
type movedRun struct {
	r        *memRun
	bytes    []byte
	num, off []uint32
}

func (m *movedRun) span(e uint32) []byte {
	hi := uint32(len(m.bytes))
	if int(e)+1 < len(m.off) {
		hi = m.off[e+1]
	}
	return m.bytes[m.off[e]:hi]
}

func (m *movedRun) str(e uint32) string { return arenaString(m.span(e)) }

// sortAbove: a string run's range of more entries than this is sorted before it is packed.
// Finish merges a range of more than maxGather pairs from its runs' sorted pieces; the
// pieces left unsorted, each at most this large, are sorted then (see sortedPiece).
const sortAbove = 1 << 15

// pack appends ranges lo..hi-1 (range j holds moved entries first[j]..first[j+1]-1) to p,
// front-coded, each range's first key whole, and sets off[j] to where range j starts,
// counted from p's start. A range of more than sortAbove entries is sorted (sorted[j] set)
// and its entry numbers written as they are; a smaller one keeps the order the entries were
// added in, which is ascending entry numbers: each is written as its distance to the one
// before (the first from 0), a byte or two instead of three.
func (m *movedRun) pack(sc *rangeScratch, first []uint32, lo, hi int, p []byte, off []uint32, sorted []bool) []byte {
	pk := packer{p: p}
	for j := lo; j < hi; j++ {
		off[j] = uint32(len(pk.p) - len(p))
		pk.prev = nil
		a, b := first[j], first[j+1]
		if b-a <= sortAbove {
			pk.last = 0
			for e := a; e < b; e++ {
				pk.addDelta(m.span(e), m.num[e])
			}
			continue
		}
		sorted[j] = true
		for _, e := range m.sortRange(sc, a, b) {
			pk.add(m.span(e), m.num[e])
		}
	}
	return pk.p
}

// rangeScratch is one range sort's scratch.
type rangeScratch struct {
	keys, tk []uint64
	es, te   []uint32
}

func (sc *rangeScratch) bytes() int64 { return int64(16*cap(sc.keys) + 8*cap(sc.es)) }

// sortRange returns entries lo..hi-1 (one range) sorted by (key, row id): a radix sort on the
// 8-byte prefix, then a comparison sort where prefixes tie.
func (m *movedRun) sortRange(sc *rangeScratch, lo, hi uint32) []uint32 {
	n := int(hi - lo)
	if cap(sc.keys) < n {
		sc.keys, sc.tk = make([]uint64, n), make([]uint64, n)
		sc.es, sc.te = make([]uint32, n), make([]uint32, n)
	}
	keys, es := sc.keys[:n], sc.es[:n]
	for x := range n {
		e := lo + uint32(x)
		keys[x], es[x] = stringPrefix(m.str(e)), e
	}
	radixSort(keys, es, sc.tk[:n], sc.te[:n])
	byStringThenID := func(a, b uint32) int {
		if c := strings.Compare(m.str(a), m.str(b)); c != 0 {
			return c
		}
		return cmp.Compare(m.r.id(m.num[a]), m.r.id(m.num[b]))
	}
	sortTies(keys, es, byStringThenID)
	return es
}

// sortTies finishes a radix sort on 8-byte prefixes: each stretch of entries whose prefixes
// tie is sorted by cmp.
func sortTies(keys []uint64, es []uint32, cmp func(a, b uint32) int) {
	for x := 0; x < len(keys); {
		y := x + 1
		for y < len(keys) && keys[y] == keys[x] {
			y++
		}
		if y-x > 1 {
			slices.SortFunc(es[x:y], cmp)
		}
		x = y
	}
}

// stringRangeCount bounds the ranges a string build is split into: enough that one range of
// every run of a build held in memory (ten million keys: ~5K a range for hex keys) sorts in
// cache at Finish; a run packs its ranges straight from its arena, one write position a range
// (see packDirect). With 256 ranges a range of ten million hex keys held 78K, and Finish
// spent 15% more CPU sorting them and reading them back.
const stringRangeCount = 2048

// stringRanges maps a string to one of at most stringRangeCount ranges, in key order, by its
// leading bytes. A linear cut of the 8-byte prefix would leave most ranges empty for text
// (hex digits use 16 byte values of 256): each of the first bytes is replaced by its rank
// among the values a sample of the run holds there, and the ranks are read as one
// mixed-radix number.
//
// A byte the sample did not hold has no rank of its own: it takes the rank of the nearest
// value below it that the sample held, and the digits after it are all set to their largest
// (or, below every value held, rank 0 and the digits after it their smallest). Were the later
// digits read from the later bytes instead, "bx" would land below "ay" when the sample held
// a and c but not b. This way the range never decreases with the key, for any key: two keys
// first differing at a byte take ranks in that byte's order, and where two bytes share a rank
// the larger one's range is the largest (or the smaller one's the smallest) that rank allows.
type stringRanges struct {
	rank  [8][256]uint16
	kind  [8][256]uint8 // seenByte, or how an unseen byte ends the number
	radix [8]uint32
	rest  [8]uint32 // ranges under one digit at depth d: the radixes after it multiplied
	depth int
	n     int // ranges: of returns 0..n-1
}

const (
	seenByte  = iota
	aboveSeen // not in the sample, above a value that was: the later digits are the largest
	belowSeen // not in the sample, below every value that was: the later digits are 0
)

func newStringRanges(r *memRun) *stringRanges {
	var seen [8][256]bool
	step := max(1, r.n/(1<<14))
	for i := 0; i < r.n; i += step {
		s := r.data[r.offs[i]:r.offs[i+1]]
		for d := range 8 {
			var v byte
			if d < len(s) {
				v = s[d]
			}
			seen[d][v] = true
		}
	}
	f := &stringRanges{}
	ranges := uint32(1)
	for d := range 8 {
		n := uint32(0)
		for v := range 256 {
			switch {
			case seen[d][v]:
				n++
			case n == 0:
				f.kind[d][v] = belowSeen
			default:
				f.kind[d][v] = aboveSeen
			}
			f.rank[d][v] = uint16(max(n, 1) - 1)
		}
		if ranges*n > stringRangeCount {
			break
		}
		ranges *= n
		f.radix[d], f.depth = n, d+1
	}
	f.n = int(ranges)
	rest := uint32(1)
	for d := f.depth - 1; d >= 0; d-- {
		f.rest[d] = rest
		rest *= f.radix[d]
	}
	return f
}

func (f *stringRanges) of(s []byte) int {
	j := uint32(0)
	for d := range f.depth {
		var v byte
		if d < len(s) {
			v = s[d]
		}
		j = j*f.radix[d] + uint32(f.rank[d][v])
		switch f.kind[d][v] {
		case aboveSeen:
			return int((j+1)*f.rest[d] - 1)
		case belowSeen:
			return int(j * f.rest[d])
		}
	}
	return int(j)
}

// packer front-codes sorted strings: entry = uvarint shared | uvarint suffix length | suffix |
// uvarint i, where shared is the length of the prefix in common with the entry before and i
// the entry's number in the run (its row id is r.id(i)). Sorted keys share their leading
// bytes, so a run of a million random 16-byte keys packs into about 15 bytes an entry, row id
// included. prev must stay valid until the next add.
type packer struct {
	p, prev []byte
	last    uint32 // addDelta: the entry number before
}

func (pk *packer) add(s []byte, i uint32) {
	shared := index.CommonPrefix(pk.prev, s)
	pk.p = binary.AppendUvarint(pk.p, uint64(shared))
	pk.p = binary.AppendUvarint(pk.p, uint64(len(s)-shared))
	pk.p = append(pk.p, s[shared:]...)
	pk.p = binary.AppendUvarint(pk.p, uint64(i))
	pk.prev = s
}

// addDelta is add for entries in ascending entry numbers: i is written as i - the last one.
func (pk *packer) addDelta(s []byte, i uint32) {
	shared := index.CommonPrefix(pk.prev, s)
	pk.p = binary.AppendUvarint(pk.p, uint64(shared))
	pk.p = binary.AppendUvarint(pk.p, uint64(len(s)-shared))
	pk.p = append(pk.p, s[shared:]...)
	pk.p = binary.AppendUvarint(pk.p, uint64(i-pk.last))
	pk.prev, pk.last = s, i
}

// runSource yields a sorted, packed string run. Its keys are decoded into blk, which the
// next fill overwrites (see merge).
type runSource struct {
	r    *memRun
	p    []byte // r.packed, or a piece packed apart (see sortedPiece)
	end  int    // the entries to decode: up to end
	pos  int    // entries decoded so far
	off  int    // their end in r.packed
	last []byte // the last key decoded: the next one's shared prefix comes from it
	blk  []byte
	ends []uint32
}

func (s *runSource) fill(dst []entry) ([]entry, error) {
	r, p := s.r, s.p
	n := min(s.end-s.pos, cap(dst))
	blk := append(s.blk[:0], s.last...) // the previous block is overwritten: keep its last key
	prev, off := 0, s.off
	ends := s.ends[:0]
	dst = dst[:0]
	for range n {
		shared, m := binary.Uvarint(p[off:])
		off += m
		l, m := binary.Uvarint(p[off:])
		off += m
		at := len(blk)
		blk = append(blk, blk[prev:prev+int(shared)]...)
		blk = append(blk, p[off:off+int(l)]...)
		off += int(l)
		i, m := binary.Uvarint(p[off:])
		off += m
		prev = at
		ends = append(ends, uint32(len(blk)))
		dst = append(dst, entry{id: r.id(uint32(i))})
	}
	// Views are taken once blk stopped growing.
	start := uint32(len(s.last))
	for j, end := range ends {
		dst[j].s = arenaString(blk[start:end])
		dst[j].k = stringPrefix(dst[j].s)
		start = end
	}
	s.last = append(s.last[:0], blk[prev:]...)
	s.blk, s.ends, s.off = blk, ends, off
	s.pos += n
	return dst, nil
}
