package ledger

import "hash/maphash"

// The ticket index maps (store id, object key) to a slot. Slots live in fixed pages of
// pageSize so that growing never copies them and never over-allocates by more than a page;
// the hash table is an open-addressing array of uint32 (slot+1, 0 = empty) with linear
// probing and backward-shift deletion, so there are no tombstones and no per-entry pointers
// for the garbage collector to trace.

const (
	pageBits = 10
	pageSize = 1 << pageBits
)

// Slot states.
const (
	stFree      uint8 = iota
	stHeld            // owned; the owner may accept, abandon or transfer it
	stAbandoned       // handed to the cleanup worker, which alone may release it
)

// slot is one ticket: 24 bytes.
type slot struct {
	name  uint32 // arena reference
	nlen  uint16 // name length
	store uint16 // store id
	owner uint32 // owner id
	prev  uint32 // previous slot+1 in the owner's list (0: none)
	next  uint32 // next slot+1 in the owner's list, or in the free list
	state uint8
}

type index struct {
	seed   maphash.Seed
	names  arena
	pages  [][]slot
	nslots uint32   // slot ids handed out so far
	free   uint32   // head of the free list, slot+1
	table  []uint32 // slot+1; len is a power of two
	shift  uint     // 64 - log2(len(table))
	count  int      // live tickets
	// prefixes counts the live prefix tickets (names ending in "/") per store id: zero lets the
	// reservation path skip every prefix check.
	prefixes map[uint16]int
}

func newIndex() *index {
	x := &index{seed: maphash.MakeSeed(), prefixes: map[uint16]int{}}
	x.table, x.shift = make([]uint32, 64), 64-6
	return x
}

func (x *index) slot(id uint32) *slot { return &x.pages[id>>pageBits][id&(pageSize-1)] }

func (x *index) name(s *slot) []byte { return x.names.get(s.name, s.nlen) }

// key returns a copy of the slot's name.
func (x *index) key(id uint32) string { return string(x.name(x.slot(id))) }

const golden = 0x9E3779B97F4A7C15

func (x *index) home(store uint16, key string) uint32 {
	h := maphash.String(x.seed, key) ^ uint64(store)*golden
	return uint32((h * golden) >> x.shift)
}

func (x *index) homeOf(id uint32) uint32 {
	s := x.slot(id)
	// maphash.Bytes and maphash.String hash equal contents equally.
	h := maphash.Bytes(x.seed, x.name(s)) ^ uint64(s.store)*golden
	return uint32((h * golden) >> x.shift)
}

// lookup returns the slot holding (store, key).
func (x *index) lookup(store uint16, key string) (uint32, bool) {
	mask := uint32(len(x.table) - 1)
	for i := x.home(store, key); ; i = (i + 1) & mask {
		e := x.table[i]
		if e == 0 {
			return 0, false
		}
		s := x.slot(e - 1)
		if s.store == store && int(s.nlen) == len(key) && string(x.name(s)) == key {
			return e - 1, true
		}
	}
}

// insert adds (store, key), which must be absent. ok is false only when the arena has run
// out of references even after compaction.
func (x *index) insert(store uint16, key string, owner uint32, state uint8) (uint32, bool) {
	if (x.count+1)*4 > len(x.table)*3 {
		x.resize(len(x.table) * 2)
	}
	ref, ok := x.names.add(key)
	if !ok {
		x.compact()
		if ref, ok = x.names.add(key); !ok {
			return 0, false
		}
	}
	id := x.allocSlot()
	*x.slot(id) = slot{name: ref, nlen: uint16(len(key)), store: store, owner: owner, state: state}
	mask := uint32(len(x.table) - 1)
	i := x.home(store, key)
	for x.table[i] != 0 {
		i = (i + 1) & mask
	}
	x.table[i] = id + 1
	x.count++
	if key[len(key)-1] == '/' {
		x.prefixes[store]++
	}
	return id, true
}

func (x *index) allocSlot() uint32 {
	if x.free != 0 {
		id := x.free - 1
		x.free = x.slot(id).next
		return id
	}
	id := x.nslots
	if id>>pageBits == uint32(len(x.pages)) {
		x.pages = append(x.pages, make([]slot, pageSize))
	}
	x.nslots++
	return id
}

// remove deletes slot id from the table and frees it. The caller has unlinked it from its owner.
func (x *index) remove(id uint32) {
	mask := uint32(len(x.table) - 1)
	i := x.homeOf(id)
	for x.table[i] != id+1 {
		i = (i + 1) & mask
	}
	// Backward-shift: pull later entries of the probe run into the hole when their home
	// position allows it, so lookups never need tombstones.
	for j := (i + 1) & mask; x.table[j] != 0; j = (j + 1) & mask {
		h := x.homeOf(x.table[j] - 1)
		if (j-h)&mask >= (j-i)&mask {
			x.table[i] = x.table[j]
			i = j
		}
	}
	x.table[i] = 0
	s := x.slot(id)
	if n := x.name(s); len(n) > 0 && n[len(n)-1] == '/' {
		x.prefixes[s.store]--
	}
	x.names.release(int(s.nlen))
	*s = slot{next: x.free}
	x.free = id + 1
	x.count--
	if x.names.wantsCompaction() {
		x.compact()
	}
}

func (x *index) resize(n int) {
	old := x.table
	x.table = make([]uint32, n)
	x.shift = 64 - uint(log2(n))
	mask := uint32(n - 1)
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := x.homeOf(e - 1)
		for x.table[i] != 0 {
			i = (i + 1) & mask
		}
		x.table[i] = e
	}
}

// compact copies the live names into a fresh arena. Hash positions do not change.
func (x *index) compact() {
	var fresh arena
	for id := uint32(0); id < x.nslots; id++ {
		s := x.slot(id)
		if s.state == stFree {
			continue
		}
		s.name, _ = fresh.add(string(x.name(s)))
	}
	x.names = fresh
}

func log2(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}
