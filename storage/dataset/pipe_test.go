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
