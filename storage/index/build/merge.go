package build

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// source yields sorted entries in blocks; fill returns an empty slice at the end.
type source interface {
	fill(dst []entry) ([]entry, error)
}

// Spill files hold entries as key (numeric: u64; string: uvarint length + bytes) | row id u64.
// String keys are decoded into blk, which the next fill overwrites (see merge).
type fileSource struct {
	r    *bufio.Reader
	str  bool
	blk  []byte
	ends []int
}

func (s *fileSource) fill(dst []entry) ([]entry, error) {
	dst = dst[:0]
	s.blk, s.ends = s.blk[:0], s.ends[:0]
	var b [8]byte
	for len(dst) < cap(dst) {
		var e entry
		var err error
		if s.str {
			var l uint64
			if l, err = binary.ReadUvarint(s.r); err == nil {
				if l > maxSpilledKey {
					return nil, fmt.Errorf("index: spilled run holds a %d-byte key", l)
				}
				at := len(s.blk)
				s.blk = append(s.blk, make([]byte, l)...)
				_, err = io.ReadFull(s.r, s.blk[at:])
				s.ends = append(s.ends, len(s.blk))
			}
		} else {
			_, err = io.ReadFull(s.r, b[:])
			e.k = binary.LittleEndian.Uint64(b[:])
		}
		if err == io.EOF {
			break
		}
		if err == nil {
			_, err = io.ReadFull(s.r, b[:])
		}
		if err != nil {
			return nil, fmt.Errorf("index: spilled run truncated: %w", err)
		}
		e.id = binary.LittleEndian.Uint64(b[:])
		dst = append(dst, e)
	}
	if s.str { // views are taken once blk stopped growing
		start := 0
		for j := range dst {
			dst[j].s = arenaString(s.blk[start:s.ends[j]])
			dst[j].k = stringPrefix(dst[j].s)
			start = s.ends[j]
		}
	}
	return dst, nil
}

func appendSpilled(b []byte, es []entry, str bool) []byte {
	for _, e := range es {
		if str {
			b = binary.AppendUvarint(b, uint64(len(e.s)))
			b = append(b, e.s...)
		} else {
			b = binary.LittleEndian.AppendUint64(b, e.k)
		}
		b = binary.LittleEndian.AppendUint64(b, e.id)
	}
	return b
}

// maxSpilledKey bounds a string key read back from a spill file: no page holds a longer one.
const maxSpilledKey = 256 << 20

// mergeBlock is how many entries a cursor pulls from its source at a time.
const mergeBlock = 4096

type cursor struct {
	src source
	buf []entry
	pos int
}

func (c *cursor) head() *entry { return &c.buf[c.pos] }

// merge streams the union of sorted sources to emit in batches of at most batch entries. The
// cursor at the top of the heap keeps emitting while its head stays below the runner-up, so
// ordered or clustered inputs cost one compare per entry.
//
// A source may decode string keys into a buffer it reuses on its next fill: the entries
// gathered so far are emitted before any cursor is refilled, and emit must copy what it keeps.
func merge(srcs []source, batch int, emit func([]entry) error) error {
	out := make([]entry, 0, batch)
	flush := func() error {
		if len(out) == 0 {
			return nil
		}
		err := emit(out)
		out = out[:0]
		return err
	}
	// advance moves c past its head; false when its source is exhausted.
	advance := func(c *cursor) (bool, error) {
		c.pos++
		if c.pos < len(c.buf) {
			return true, nil
		}
		if err := flush(); err != nil {
			return false, err
		}
		var err error
		c.buf, err = c.src.fill(c.buf[:0])
		c.pos = 0
		return len(c.buf) > 0, err
	}
	var h []*cursor
	for _, s := range srcs {
		c := &cursor{src: s, buf: make([]entry, 0, mergeBlock)}
		c.pos = -1
		ok, err := advance(c)
		if err != nil {
			return err
		}
		if ok {
			h = append(h, c)
		}
	}
	less := func(i, j int) bool { return lessEntry(h[i].head(), h[j].head()) }
	down := func(i int) {
		for {
			l := 2*i + 1
			if l >= len(h) {
				return
			}
			if r := l + 1; r < len(h) && less(r, l) {
				l = r
			}
			if !less(l, i) {
				return
			}
			h[i], h[l] = h[l], h[i]
			i = l
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	for len(h) > 0 {
		c := h[0]
		var bound *entry
		if len(h) > 1 {
			bound = h[1].head()
			if len(h) > 2 && lessEntry(h[2].head(), bound) {
				bound = h[2].head()
			}
		}
		if bound == nil { // the last cursor: copy whole blocks
			for ok := true; ok; {
				n := copy(out[len(out):cap(out)], c.buf[c.pos:])
				out, c.pos = out[:len(out)+n], c.pos+n-1
				if len(out) == batch {
					if err := flush(); err != nil {
						return err
					}
				}
				var err error
				if ok, err = advance(c); err != nil {
					return err
				}
			}
			break
		}
		for {
			e := c.head()
			if lessEntry(bound, e) {
				break
			}
			out = append(out, *e)
			if len(out) == batch {
				if err := flush(); err != nil {
					return err
				}
			}
			if c.pos+1 < len(c.buf) { // advance's common case, without a call
				c.pos++
				continue
			}
			ok, err := advance(c)
			if err != nil {
				return err
			}
			if !ok {
				h[0] = h[len(h)-1]
				h = h[:len(h)-1]
				break
			}
		}
		down(0)
	}
	return flush()
}

// errClosed: the builder was used after Close.
var errClosed = errors.New("index: BTREE builder used after Close")
