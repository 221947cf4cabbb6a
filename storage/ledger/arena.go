package ledger

// The arena keeps every ticketed object name in a few large byte chunks instead of one Go
// string per name: a string costs a 16-byte header plus a heap object rounded up to its
// size class, and the garbage collector has to trace each one. A name is addressed by a
// 32-bit reference (chunk<<16 | offset) and a 16-bit length kept in its slot.

const (
	chunkBits = 16
	chunkSize = 1 << chunkBits // bytes per chunk; also the hard limit on one name
	maxChunks = 1 << 16        // references are 32 bits: 65,536 chunks of 64 KiB = 4 GiB
)

// MaxKeyLen is the longest object key the ledger accepts (the S3 limit).
const MaxKeyLen = 1024

type arena struct {
	chunks  [][]byte // each allocated with capacity chunkSize; only the last one grows
	live    int      // bytes of names still referenced
	garbage int      // bytes of released names, reclaimed by compaction
}

// add copies name into the arena and returns its reference. ok is false when the arena is
// out of references (the caller compacts and retries, or refuses the reservation).
func (a *arena) add(name string) (ref uint32, ok bool) {
	last := len(a.chunks) - 1
	if last < 0 || len(a.chunks[last])+len(name) > chunkSize {
		if len(a.chunks) == maxChunks {
			return 0, false
		}
		a.chunks = append(a.chunks, make([]byte, 0, chunkSize))
		last++
	}
	off := len(a.chunks[last])
	a.chunks[last] = append(a.chunks[last], name...)
	a.live += len(name)
	return uint32(last)<<chunkBits | uint32(off), true
}

// get returns the bytes of a name; they stay valid until the next compaction.
func (a *arena) get(ref uint32, n uint16) []byte {
	c := a.chunks[ref>>chunkBits]
	off := int(ref & (chunkSize - 1))
	return c[off : off+int(n)]
}

// release marks n bytes as garbage.
func (a *arena) release(n int) {
	a.live -= n
	a.garbage += n
}

// wantsCompaction reports whether more than half of the arena is garbage (and enough of it
// to be worth a pass).
func (a *arena) wantsCompaction() bool {
	return a.garbage > 2*chunkSize && a.garbage > a.live
}
