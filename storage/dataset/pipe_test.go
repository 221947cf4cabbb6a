package dataset

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// TestChunkPipe: bytes arrive whole and in order across chunk boundaries; the writer's close
// error reaches the reader after what was written; a reader that gives up fails the writer's
// next write instead of blocking it.
func TestChunkPipe(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	want := make([]byte, 5*pipeChunk+12345)
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	for _, inFlight := range []int{1, 4} {
		p := newChunkPipe(inFlight)
		go func() {
			for b := want; len(b) > 0; {
				n := min(len(b), 1+r.IntN(3*pipeChunk/2))
				if _, err := p.Write(b[:n]); err != nil {
					t.Error(err)
				}
				b = b[n:]
			}
			p.CloseWriter(nil)
		}()
		got, err := io.ReadAll(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d in flight: read %d bytes (want %d), %v", inFlight, len(got), len(want), err)
		}
	}
	// WriteTo, alone and after a Read that took part of a chunk: the same bytes, each write
	// at most a chunk.
	for _, first := range []int{0, 10, pipeChunk + 7} {
		p := newChunkPipe(2)
		go func() {
			if _, err := p.Write(want); err != nil {
				t.Error(err)
			}
			p.CloseWriter(nil)
		}()
		head := make([]byte, first)
		if _, err := io.ReadFull(p, head); err != nil {
			t.Fatal(err)
		}
		var w chunkRecorder
		n, err := p.WriteTo(&w)
		if got := append(head, w.b...); err != nil || n != int64(len(want)-first) || !bytes.Equal(got, want) || w.largest > pipeChunk {
			t.Fatalf("read %d then WriteTo: %d bytes, %v; equal %v, largest write %d", first, n, err, bytes.Equal(got, want), w.largest)
		}
	}
	t.Run("writer-error", func(t *testing.T) {
		p := newChunkPipe(4)
		boom := errors.New("boom")
		go func() {
			p.Write(want[:100])
			p.CloseWriter(boom)
		}()
		got, err := io.ReadAll(p)
		if !errors.Is(err, boom) || len(got) != 0 {
			t.Fatalf("read %d bytes, %v; want the close error (a failed build's tail is not handed over)", len(got), err)
		}
		p = newChunkPipe(4)
		go func() {
			p.Write(want[:2*pipeChunk+5])
			p.CloseWriter(boom)
		}()
		var w chunkRecorder
		if n, err := p.WriteTo(&w); !errors.Is(err, boom) || n != 2*pipeChunk {
			t.Fatalf("WriteTo: %d bytes, %v; want the two full chunks and the close error", n, err)
		}
	})
	t.Run("destination-fails", func(t *testing.T) {
		p := newChunkPipe(2)
		full := errors.New("disk full")
		go func() {
			err := error(nil)
			for err == nil {
				_, err = p.Write(want[:pipeChunk])
			}
			p.CloseWriter(err)
		}()
		n, err := p.WriteTo(&failAfter{n: 3, err: full})
		if !errors.Is(err, full) || n != 2*pipeChunk {
			t.Fatalf("WriteTo into a failing writer: %d bytes, %v", n, err)
		}
		p.CloseReader(err) // as uploadSegment does: the writer above stops
	})
	t.Run("reader-gives-up", func(t *testing.T) {
		p := newChunkPipe(4)
		gone := errors.New("put failed")
		buf := make([]byte, 10)
		if _, err := p.Write(want[:pipeChunk]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(p, buf); err != nil {
			t.Fatal(err)
		}
		p.CloseReader(gone)
		var err error
		for range 6 { // more than the pipe holds: a write must fail, not block
			if _, err = p.Write(want[:pipeChunk]); err != nil {
				break
			}
		}
		if !errors.Is(err, gone) {
			t.Fatalf("write after the reader gave up: %v", err)
		}
		p.CloseWriter(err)
	})
}

// chunkRecorder keeps what is written and the largest single write.
type chunkRecorder struct {
	b       []byte
	largest int
}

func (c *chunkRecorder) Write(p []byte) (int, error) {
	c.b = append(c.b, p...)
	c.largest = max(c.largest, len(p))
	return len(p), nil
}

// failAfter takes n-1 writes, then fails.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n--; f.n == 0 {
		return 0, f.err
	}
	return len(p), nil
}
