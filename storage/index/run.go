package index

import (
	"cmp"
	"encoding/binary"
	"slices"
	"strings"
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
	data []byte   // string keys, concatenated, while the run fills
	offs []uint32 // string entry i is data[offs[i]:offs[i+1]], while the run fills
	// packed holds a sealed run's strings in sorted order, each as uvarint length + bytes:
	// the merge then reads them sequentially instead of chasing order into data.
	packed []byte

	// order maps position to entry once keys were reordered; nil when they were not.
	order []uint32
	// bounds: a numeric run's bucket j is keys[bounds[j]:bounds[j+1]] (see partition).
	bounds  []uint32
	sorted  bool // a numeric run that was in (key, row id) order as added
	firstID uint64
}

// newRun allocates a run for capacity entries (and dataCap bytes of strings), reusing a string
// run's arena when one is given and large enough.
func newRun(str bool, capacity, dataCap int, reuse fillArena) *memRun {
	r := &memRun{idsAscending: true}
	if str {
		r.offs, r.data = reuse.offs, reuse.data
		if cap(r.offs) < capacity+1 {
			r.offs = make([]uint32, 1, capacity+1)
		}
		if cap(r.data) < dataCap {
			r.data = make([]byte, 0, dataCap)
		}
		r.offs, r.data = r.offs[:1], r.data[:0]
		r.offs[0] = 0
	} else {
		r.keys = make([]uint64, 0, capacity)
	}
	return r
}

// bytes is the memory the run holds.
func (r *memRun) bytes() int64 {
	return int64(8*cap(r.keys) + cap(r.data) + 4*cap(r.offs) + cap(r.packed) + 8*cap(r.ids) + 4*cap(r.order) + 4*cap(r.bounds))
}

// maxArena keeps string offsets within uint32.
const maxArena = 1<<32 - 1

// add appends keys at row ids first, first+1, ...
func addToRun[K Key](r *memRun, keys []K, first uint64) {
	r.addIDs(len(keys), first)
	switch ks := any(keys).(type) {
	case []int64:
		for _, k := range ks {
			r.keys = append(r.keys, encodeInt(k))
		}
	case []float64:
		for _, k := range ks {
			r.keys = append(r.keys, encodeFloat(k))
		}
	case []string:
		for _, k := range ks {
			r.data = append(r.data, k...)
			r.offs = append(r.offs, uint32(len(r.data)))
		}
	}
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
}

func (sc *sortScratch) grow(n int) {
	if cap(sc.o) < n {
		sc.a, sc.b, sc.o = make([]uint64, n), make([]uint64, n), make([]uint32, n)
	}
}

func iota32(n int) []uint32 {
	o := make([]uint32, n)
	for i := range o {
		o[i] = uint32(i)
	}
	return o
}

// sortStrings orders the run: O(n) when it already is, else a radix sort on 8-byte prefixes
// followed by a comparison sort of each group of equal prefixes.
func (r *memRun) sortStrings(sc *sortScratch) {
	sorted := true
	for i := 1; i < r.n && sorted; i++ {
		c := strings.Compare(r.str(uint32(i-1)), r.str(uint32(i)))
		sorted = c < 0 || (c == 0 && r.idsAscending)
	}
	if !sorted {
		r.sortStringOrder(sc)
	}
	r.pack()
}

// pack rewrites the strings in sorted order and drops the fill-time arena and offsets.
func (r *memRun) pack() {
	p := make([]byte, 0, len(r.data)+r.n*binary.MaxVarintLen32)
	for pos := range r.n {
		i := uint32(pos)
		if r.order != nil {
			i = r.order[pos]
		}
		s := r.data[r.offs[i]:r.offs[i+1]]
		p = binary.AppendUvarint(p, uint64(len(s)))
		p = append(p, s...)
	}
	r.packed = slices.Clip(p)
	r.data, r.offs = nil, nil
}

func (r *memRun) sortStringOrder(sc *sortScratch) {
	sc.grow(r.n)
	pfx := sc.a[:r.n]
	for i := range pfx {
		pfx[i] = stringPrefix(r.str(uint32(i)))
	}
	r.order = iota32(r.n)
	radixSort(pfx, r.order, sc.b, sc.o)
	byStringThenID := func(a, b uint32) int {
		if c := strings.Compare(r.str(a), r.str(b)); c != 0 {
			return c
		}
		return cmp.Compare(r.id(a), r.id(b))
	}
	for i := 0; i < r.n; {
		j := i + 1
		for j < r.n && pfx[j] == pfx[i] {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(r.order[i:j], byStringThenID)
		}
		i = j
	}
}

// fillStrings copies sorted entries of a packed string run starting at position pos (at
// byte offset off) into dst[:0], up to cap(dst).
func (r *memRun) fillStrings(pos, off int, dst []entry) ([]entry, int) {
	dst = dst[:0]
	for p := pos; p < min(r.n, pos+cap(dst)); p++ {
		i := uint32(p)
		if r.order != nil {
			i = r.order[p]
		}
		l, m := binary.Uvarint(r.packed[off:])
		s := arenaString(r.packed[off+m : off+m+int(l)])
		off += m + int(l)
		dst = append(dst, entry{k: stringPrefix(s), s: s, id: r.id(i)})
	}
	return dst, off
}
