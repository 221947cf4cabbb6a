package index

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

// runSource yields a sorted, packed string run.
type runSource struct {
	r        *memRun
	pos, off int
}

func (s *runSource) fill(dst []entry) ([]entry, error) {
	dst, s.off = s.r.fillStrings(s.pos, s.off, dst)
	s.pos += len(dst)
	return dst, nil
}

// Spill files hold entries as key (numeric: u64; string: uvarint length + bytes) | row id u64.
type fileSource struct {
	r   *bufio.Reader
	str bool
}

func (s *fileSource) fill(dst []entry) ([]entry, error) {
	dst = dst[:0]
	var b [8]byte
	for len(dst) < cap(dst) {
		var e entry
		var err error
		if s.str {
			var l uint64
			if l, err = binary.ReadUvarint(s.r); err == nil {
				buf := make([]byte, l)
				if _, err = io.ReadFull(s.r, buf); err == nil {
					e.s = string(buf)
					e.k = stringPrefix(e.s)
				}
			}
		} else {
			_, err = io.ReadFull(s.r, b[:])
			e.k = binary.LittleEndian.Uint64(b[:])
		}
		if err == io.EOF {
			return dst, nil
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

// mergeBlock is how many entries a cursor pulls from its source at a time.
const mergeBlock = 4096

type cursor struct {
	src source
	buf []entry
	pos int
}

func (c *cursor) head() *entry { return &c.buf[c.pos] }

// advance moves past the head; false when the source is exhausted.
func (c *cursor) advance() (bool, error) {
	c.pos++
	if c.pos < len(c.buf) {
		return true, nil
	}
	var err error
	c.buf, err = c.src.fill(c.buf[:0])
	c.pos = 0
	return len(c.buf) > 0, err
}

// merge streams the union of sorted sources to emit in batches of at most batch entries (a
// full batch except the last). The cursor at the top of the heap keeps emitting while its
// head stays below the runner-up, so ordered or clustered inputs cost one compare per entry.
func merge(srcs []source, batch int, emit func([]entry) error) error {
	var h []*cursor
	for _, s := range srcs {
		c := &cursor{src: s, buf: make([]entry, 0, mergeBlock)}
		c.pos = -1
		ok, err := c.advance()
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
	out := make([]entry, 0, batch)
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
					if err := emit(out); err != nil {
						return err
					}
					out = out[:0]
				}
				var err error
				if ok, err = c.advance(); err != nil {
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
				if err := emit(out); err != nil {
					return err
				}
				out = out[:0]
			}
			ok, err := c.advance()
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
	if len(out) > 0 {
		return emit(out)
	}
	return nil
}

// errClosed: the builder was used after Close.
var errClosed = errors.New("index: BTREE builder used after Close")
