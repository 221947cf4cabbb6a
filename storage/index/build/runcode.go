package build

import (
	"encoding/binary"

	"github.com/cba1309c/steward/storage/index"
)

// A string build whose keys are all short over a small alphabet (hex digests, decimal codes,
// dates, short identifiers) is built as a numeric one: each key becomes one uint64 whose
// unsigned order is the keys' byte order (KeyCode), so its runs are bucketed and radix-sorted
// as numbers are (bucket.go), with no front-coding at seal and no decoding at Finish, and its
// pages store the numbers and the code (format 4's coded form), spelled out only where front
// coding is shorter. The code is taken from the first run; a later run with a key it cannot
// code ends it for the rest of the build (see BTreeBuilder.uncode).

// newKeyCode returns the code of the run's keys (NewKeyCode over the bytes they hold and
// their lengths), or nil when they do not fit one uint64 each. The first run decides for the
// build, and a later key the code cannot take costs a spill of every coded run before it (see
// BTreeBuilder.uncode), so the code is taken only where that is unlikely. An alphabet seen
// over a whole first run (half a million keys by default) rarely meets a new byte after.
func newKeyCode(r *memRun) *index.KeyCode {
	if r.n == 0 {
		return nil
	}
	return index.KeyCodeOf(r.data, r.offs[:r.n+1])
}

// encodeRun codes the run's keys into keys (grown to the run's size) and reports whether every
// key fits. Its two halves are coded at once, as partition scatters them (see there).
func encodeRun(c *index.KeyCode, r *memRun, keys []uint64) ([]uint64, bool) {
	if cap(keys) < r.n {
		keys = make([]uint64, r.n)
	}
	keys = keys[:r.n]
	mid := r.n / 2
	var ok [2]bool
	both(func() { ok[0] = encodeKeys(c, r, keys[:mid], 0) }, func() { ok[1] = encodeKeys(c, r, keys[mid:], mid) })
	return keys, ok[0] && ok[1]
}

// encodeKeys codes the run's keys from on into keys, and reports whether they all fit.
func encodeKeys(c *index.KeyCode, r *memRun, keys []uint64, from int) bool {
	return c.EncodeBytes(keys, r.data, r.offs[from:from+len(keys)+1])
}

// appendSpilled is appendSpilled for coded keys (e.k), spelled out.
func appendCodedSpilled(c *index.KeyCode, b []byte, es []entry) []byte {
	for _, e := range es {
		b = binary.AppendUvarint(b, uint64(c.KeyLen(e.k)))
		b = c.AppendKey(b, e.k)
		b = binary.LittleEndian.AppendUint64(b, e.id)
	}
	return b
}
