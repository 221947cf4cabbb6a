package dataset

import (
	"io"
	"sync"
)

// chunkPipe is io.Pipe with chunks of pipeChunk bytes, up to a given number in flight. A
// segment builder writes into it while the store's Put reads: with one chunk in flight it is
// io.Pipe behind a bufio.Writer, whose write returns only once the reader has taken all of it,
// so encoding and storing take turns; with more, the builder goes on encoding while Put
// stores the chunk before. Writes are buffered (no bufio needed).
type chunkPipe struct {
	full chan []byte
	free chan []byte
	done chan struct{} // closed by the reader's CloseWithError: writes fail from then on
	buf  []byte        // the writer's chunk being filled
	cur  []byte        // what is left of the reader's chunk, at
	at   []byte
	once sync.Once
	// werr is the writer's close error (nil: EOF), set before full is closed; rerr the
	// reader's, set before done is closed.
	werr, rerr error
}

const pipeChunk = 1 << 20

func newChunkPipe(inFlight int) *chunkPipe {
	inFlight = max(inFlight, 1)
	p := &chunkPipe{full: make(chan []byte, inFlight), free: make(chan []byte, inFlight), done: make(chan struct{})}
	for range inFlight - 1 {
		p.free <- make([]byte, 0, pipeChunk)
	}
	p.buf = make([]byte, 0, pipeChunk)
	return p
}

// Write implements io.Writer for the builder.
func (p *chunkPipe) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		m := min(len(b), pipeChunk-len(p.buf))
		p.buf = append(p.buf, b[:m]...)
		b = b[m:]
		if len(p.buf) == pipeChunk {
			if err := p.send(); err != nil {
				return n - len(b) - m, err
			}
		}
	}
	return n, nil
}

// send hands the chunk being filled to the reader and takes a free one.
func (p *chunkPipe) send() error {
	select {
	case p.full <- p.buf:
	case <-p.done:
		return p.rerr
	}
	select {
	case p.buf = <-p.free:
		return nil
	case <-p.done:
		return p.rerr
	}
}

// CloseWriter hands over what is buffered and ends the stream: the reader sees err, or EOF
// when err is nil. Call it once.
func (p *chunkPipe) CloseWriter(err error) {
	if err == nil && len(p.buf) > 0 {
		err = p.send()
	}
	p.werr = err
	close(p.full)
}

// Read implements io.Reader for Put.
func (p *chunkPipe) Read(b []byte) (int, error) {
	for len(p.cur) == 0 {
		if !p.nextChunk() {
			if p.werr != nil {
				return 0, p.werr
			}
			return 0, io.EOF
		}
	}
	n := copy(b, p.cur)
	p.cur = p.cur[n:]
	return n, nil
}

// WriteTo implements io.WriterTo for Put: each chunk goes to w whole as it comes, without the
// copy into the caller's buffer that Read makes (a local Put writes 1 MiB at a time instead of
// 32 KiB). It returns at the end of the stream with the writer's close error, nil at EOF, or
// with w's error; a Read may come before it.
func (p *chunkPipe) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for {
		if len(p.cur) > 0 {
			m, err := w.Write(p.cur)
			n += int64(m)
			p.cur = p.cur[m:]
			if err != nil {
				return n, err
			}
		}
		if !p.nextChunk() {
			return n, p.werr
		}
	}
}

// nextChunk hands the chunk the reader has finished back to the writer and takes the next one;
// false at the end of the stream (the writer's close error is then in werr).
func (p *chunkPipe) nextChunk() bool {
	if p.at != nil {
		p.free <- p.at[:0] // never blocks: free holds every chunk
	}
	c, ok := <-p.full
	if !ok {
		p.cur, p.at = nil, nil
		return false
	}
	p.cur, p.at = c, c
	return true
}

// CloseReader makes the writer's next and pending writes fail with err (Put gave up).
func (p *chunkPipe) CloseReader(err error) {
	p.once.Do(func() {
		p.rerr = err
		close(p.done)
	})
}
