package rpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/sourcegraph/jsonrpc2"
)

// Framing selects how JSON-RPC messages are delimited on a byte stream.
type Framing int

const (
	// ContentLength frames each message with LSP-style headers: "Content-Length: N\r\n\r\n" then N
	// bytes of JSON. The default.
	ContentLength Framing = iota
	// NewlineDelimited puts one JSON message per line (convenient from a shell).
	NewlineDelimited
)

func (f Framing) String() string {
	switch f {
	case ContentLength:
		return "content-length"
	case NewlineDelimited:
		return "ndjson"
	}
	return fmt.Sprintf("framing(%d)", int(f))
}

// ParseFraming accepts "content-length" (or "") and "ndjson".
func ParseFraming(s string) (Framing, error) {
	switch s {
	case "", "content-length":
		return ContentLength, nil
	case "ndjson", "newline":
		return NewlineDelimited, nil
	}
	return 0, fmt.Errorf("unknown framing %q (want content-length or ndjson)", s)
}

// DefaultMaxFrame bounds one message in either direction unless StreamOptions.MaxFrame says otherwise.
const DefaultMaxFrame = 4 << 20

const (
	maxHeaderLine = 1024 // bytes in one Content-Length header line
	maxHeaders    = 16   // header lines in one frame
	sniffBytes    = 4096 // bytes of an oversized frame kept to find its id
)

// StreamOptions configures NewStream.
type StreamOptions struct {
	// Framing of messages; default ContentLength.
	Framing Framing
	// MaxFrame bounds the body of one message in bytes, both directions; default DefaultMaxFrame.
	MaxFrame int
	// FailOnBadFrame closes the stream on a malformed or oversized incoming frame instead of
	// answering it with a JSON-RPC error and reading on. Servers answer (the default); clients fail,
	// because a corrupt answer from the sidecar cannot be matched to its call.
	FailOnBadFrame bool
	// Rejected, if set, is called once per rejected incoming frame with an error wrapping its sentinel.
	Rejected func(err error)
}

func (o StreamOptions) withDefaults() StreamOptions {
	if o.MaxFrame <= 0 {
		o.MaxFrame = DefaultMaxFrame
	}
	return o
}

// Stream is a bounded jsonrpc2.ObjectStream. A malformed or oversized incoming frame never reaches
// the jsonrpc2 connection: the stream answers it with a JSON-RPC error (id echoed when it can be
// found) and reads the next frame, so one bad message does not cost the connection.
type Stream struct {
	opts StreamOptions
	r    *bufio.Reader
	w    io.Writer
	c    io.Closer

	wmu  sync.Mutex
	wbuf []byte
	// resync is set after a malformed header: skip input to the next "Content-Length:".
	resync bool
}

var _ jsonrpc2.ObjectStream = (*Stream)(nil)

// NewStream returns a bounded JSON-RPC object stream over rwc.
func NewStream(rwc io.ReadWriteCloser, opts StreamOptions) *Stream {
	opts = opts.withDefaults()
	return &Stream{opts: opts, r: bufio.NewReaderSize(rwc, 64<<10), w: rwc, c: rwc}
}

// badFrame is an incoming frame the stream refuses; id is the raw JSON id or nil.
type badFrame struct {
	err error
	id  json.RawMessage
}

func (b *badFrame) Error() string { return b.err.Error() }
func (b *badFrame) Unwrap() error { return b.err }

// WriteObject marshals obj and writes it as one frame. A message larger than MaxFrame is not
// written; the error wraps ErrFrameTooLarge.
func (s *Stream) WriteObject(obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("rpc: marshal message: %w", err)
	}
	if len(b) > s.opts.MaxFrame {
		return fmt.Errorf("%w: outgoing message of %d bytes exceeds %d", ErrFrameTooLarge, len(b), s.opts.MaxFrame)
	}
	return s.writeFrame(b)
}

func (s *Stream) writeFrame(body []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	buf := s.wbuf[:0]
	if s.opts.Framing == ContentLength {
		buf = append(buf, "Content-Length: "...)
		buf = strconv.AppendInt(buf, int64(len(body)), 10)
		buf = append(buf, "\r\n\r\n"...)
		buf = append(buf, body...)
	} else {
		buf = append(buf, body...) // encoding/json never emits a raw newline
		buf = append(buf, '\n')
	}
	_, err := s.w.Write(buf)
	if cap(buf) <= 64<<10 {
		s.wbuf = buf
	}
	return err
}

// ReadObject reads the next valid message into v, answering and skipping invalid ones.
func (s *Stream) ReadObject(v any) error {
	for {
		frame, err := s.readFrame()
		if err == nil {
			err = decodeMessage(frame, v)
			if err == nil {
				return nil
			}
		}
		var bad *badFrame
		if !errors.As(err, &bad) {
			return err
		}
		if s.opts.Rejected != nil {
			s.opts.Rejected(bad.err)
		}
		if s.opts.FailOnBadFrame {
			return bad.err
		}
		if err := s.reject(bad); err != nil {
			return err
		}
	}
}

// Close closes the underlying connection.
func (s *Stream) Close() error { return s.c.Close() }

func (s *Stream) reject(bad *badFrame) error {
	id := bad.id
	if id == nil {
		id = json.RawMessage("null")
	}
	code := CodeInvalidRequest
	var sent *Sentinel
	if errors.As(bad.err, &sent) {
		code = sent.code
	}
	msg, _ := json.Marshal(truncate(bad.err.Error()))
	body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%s}}`, id, code, msg)
	return s.writeFrame(body)
}

func (s *Stream) readFrame() ([]byte, error) {
	if s.opts.Framing == NewlineDelimited {
		return s.readLineFrame()
	}
	return s.readContentLengthFrame()
}

// readContentLengthFrame reads headers, then the body. Malformed headers make the stream skip to
// the next "Content-Length:" so that a peer's framing bug costs one message, not the connection.
func (s *Stream) readContentLengthFrame() ([]byte, error) {
	length, err := s.readHeaders()
	if err != nil {
		return nil, err
	}
	if length > s.opts.MaxFrame {
		return nil, s.discardOversized(int64(length))
	}
	body := make([]byte, length)
	if _, err := io.ReadFull(s.r, body); err != nil {
		return nil, noEOF(err)
	}
	return body, nil
}

func (s *Stream) readHeaders() (int, error) {
	length := -1
	if s.resync {
		if err := s.skipToContentLength(); err != nil {
			return 0, err
		}
		s.resync = false
		rest, err := s.readHeaderLine()
		if err != nil {
			return 0, err
		}
		if length, err = parseLength(rest); err != nil {
			return 0, s.badHeader(err)
		}
	}
	for lines := 0; ; lines++ {
		line, err := s.readHeaderLine()
		if err != nil {
			if lines == 0 && length < 0 && errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, err
		}
		if len(line) == 0 {
			if length >= 0 {
				return length, nil
			}
			if lines == 0 {
				lines = -1 // stray blank line between frames: tolerated
				continue
			}
			return 0, s.badHeader(errors.New("header block without Content-Length"))
		}
		if lines >= maxHeaders {
			return 0, s.badHeader(fmt.Errorf("more than %d header lines", maxHeaders))
		}
		name, value, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return 0, s.badHeader(fmt.Errorf("malformed header line %q", clip(line)))
		}
		if bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			if length, err = parseLength(value); err != nil {
				return 0, s.badHeader(err)
			}
		}
	}
}

func parseLength(v []byte) (int, error) {
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid Content-Length %q", clip(v))
	}
	return n, nil
}

func (s *Stream) badHeader(err error) error {
	s.resync = true
	return &badFrame{err: fmt.Errorf("%w: %w", ErrInvalidRequest, err)}
}

// readHeaderLine returns one header line without its line ending. An over-long line is a bad frame.
func (s *Stream) readHeaderLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxHeaderLine {
			return nil, s.badHeader(fmt.Errorf("header line longer than %d bytes", maxHeaderLine))
		}
		if err == nil {
			return bytes.TrimRight(line, "\r\n"), nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			if len(line) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// skipToContentLength discards input up to and including the next "content-length:" (any case).
func (s *Stream) skipToContentLength() error {
	const marker = "content-length:" // 'c' occurs once, so a restart on mismatch is exact
	matched := 0
	for matched < len(marker) {
		b, err := s.r.ReadByte()
		if err != nil {
			return err
		}
		if b >= 'A' && b <= 'Z' {
			b += 'a' - 'A'
		}
		switch {
		case b == marker[matched]:
			matched++
		case b == marker[0]:
			matched = 1
		default:
			matched = 0
		}
	}
	return nil
}

func (s *Stream) discardOversized(n int64) error {
	head := make([]byte, min(n, sniffBytes))
	if _, err := io.ReadFull(s.r, head); err != nil {
		return noEOF(err)
	}
	if _, err := io.CopyN(io.Discard, s.r, n-int64(len(head))); err != nil {
		return noEOF(err)
	}
	return &badFrame{
		err: fmt.Errorf("%w: message of %d bytes exceeds the %d-byte limit", ErrFrameTooLarge, n, s.opts.MaxFrame),
		id:  sniffID(head),
	}
}

// readLineFrame reads one newline-delimited message, bounded by MaxFrame.
func (s *Stream) readLineFrame() ([]byte, error) {
	for {
		var line []byte
		var total int64
		for {
			chunk, err := s.r.ReadSlice('\n')
			total += int64(len(chunk))
			if total <= int64(s.opts.MaxFrame)+2 {
				line = append(line, chunk...)
			} else if len(line) < sniffBytes {
				line = append(line, chunk[:min(len(chunk), sniffBytes-len(line))]...)
			}
			if err == nil {
				break
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) && total > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		if total > int64(s.opts.MaxFrame)+2 { // +2: the line ending is not part of the message
			return nil, &badFrame{
				err: fmt.Errorf("%w: message of %d bytes exceeds the %d-byte limit", ErrFrameTooLarge, total-1, s.opts.MaxFrame),
				id:  sniffID(line),
			}
		}
		body := bytes.TrimRight(line, "\r\n")
		if len(bytes.TrimSpace(body)) == 0 {
			continue
		}
		return body, nil
	}
}

// decodeMessage unmarshals one frame into v, classifying failures as bad frames.
func decodeMessage(frame []byte, v any) error {
	trimmed := bytes.TrimSpace(frame)
	if len(trimmed) > 0 && trimmed[0] == '[' && json.Valid(trimmed) {
		return &badFrame{err: fmt.Errorf("%w: batch requests are not supported", ErrInvalidRequest)}
	}
	if len(trimmed) == 0 || trimmed[0] != '{' {
		if json.Valid(trimmed) {
			return &badFrame{err: fmt.Errorf("%w: message is not a JSON object", ErrInvalidRequest)}
		}
		return &badFrame{err: fmt.Errorf("%w: message is not valid JSON", ErrParse)}
	}
	if err := json.Unmarshal(frame, v); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return &badFrame{err: fmt.Errorf("%w: %v", ErrParse, err)}
		}
		return &badFrame{err: fmt.Errorf("%w: %v", ErrInvalidRequest, err), id: sniffID(frame)}
	}
	return nil
}

// sniffID finds the top-level "id" of a possibly truncated JSON object, returning nil when it
// cannot be found or is not a string or number.
func sniffID(b []byte) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil
		}
		if key != "id" {
			continue
		}
		if len(raw) > 0 && (raw[0] == '"' || raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) && len(raw) <= 256 {
			return raw
		}
		return nil
	}
	return nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func clip(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
