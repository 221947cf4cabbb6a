package rpc_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// fuzzConn feeds input to a Stream and records what the stream writes back.
type fuzzConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *fuzzConn) Read(p []byte) (int, error)  { return c.in.Read(p) }
func (c *fuzzConn) Write(p []byte) (int, error) { return c.out.Write(p) }
func (c *fuzzConn) Close() error                { return nil }

// FuzzStream checks that no input makes the framing panic, read past its bound, or answer with
// anything but well-formed frames of valid JSON-RPC error objects.
func FuzzStream(f *testing.F) {
	seeds := []string{
		"Content-Length: 17\r\n\r\n{\"jsonrpc\":\"2.0\"}",
		"Content-Length: 5\r\n\r\n{\"a\":",
		"Content-Length: 99999999\r\n\r\n{}",
		"Content-Length: -1\r\n\r\n",
		"content-length:2\r\nX-A: b\r\n\r\n{}",
		"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}\n",
		"[1,2]\n\n\r\n{\"id\":\"x\"}\n",
		"garbage\r\n\r\nContent-Length: 2\r\n\r\n{}",
	}
	for _, s := range seeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, input []byte, ndjson bool) {
		framing := rpc.ContentLength
		if ndjson {
			framing = rpc.NewlineDelimited
		}
		conn := &fuzzConn{in: bytes.NewReader(input)}
		s := rpc.NewStream(conn, rpc.StreamOptions{Framing: framing, MaxFrame: 256})
		for i := 0; i < 1000; i++ {
			var v json.RawMessage
			err := s.ReadObject(&v)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("read error %v is neither EOF nor unexpected EOF", err)
				}
				break
			}
			if len(v) > 256 {
				t.Fatalf("accepted a %d-byte message over the 256-byte bound", len(v))
			}
		}
		// Every answer the stream wrote must be one frame holding a JSON-RPC error object.
		replies := rpc.NewStream(&fuzzConn{in: bytes.NewReader(conn.out.Bytes())}, rpc.StreamOptions{Framing: framing, FailOnBadFrame: true})
		for {
			var msg struct {
				JSONRPC string          `json:"jsonrpc"`
				ID      json.RawMessage `json:"id"`
				Error   *struct {
					Code int64 `json:"code"`
				} `json:"error"`
			}
			err := replies.ReadObject(&msg)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("stream wrote an unreadable answer: %v\n%q", err, conn.out.Bytes())
			}
			if msg.JSONRPC != "2.0" || msg.Error == nil || msg.Error.Code == 0 || len(msg.ID) == 0 {
				t.Fatalf("answer is not a JSON-RPC error: %+v", msg)
			}
		}
	})
}

// FuzzDecodeParams checks that params decoding never panics and that whatever it accepts passed
// validation and survives a round trip.
func FuzzDecodeParams(f *testing.F) {
	f.Add([]byte(`{"protocol_version":1}`))
	f.Add([]byte(`{"invocation_id":"i1","deadline_unix_ms":1,"dataset":{"store":{"url":"file:///d"},"path":"p"},"pinned_version":1,"op":"CREATE","index":{"name":"n","columns":["c"],"type":"BTREE"}}`))
	f.Add([]byte(`{"invocation_id":"i1","op":"DROP","if_exists":true}`))
	f.Add([]byte(`{"invocation_id":"inv-0001"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"unknown":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		check := func(p rpc.Validator, err error) {
			if err != nil {
				if !errors.Is(err, rpc.ErrInvalidParams) {
					t.Fatalf("decode error %v does not wrap ErrInvalidParams", err)
				}
				return
			}
			if verr := p.Validate(); verr != nil {
				t.Fatalf("accepted params that fail validation: %v", verr)
			}
		}
		h, err := rpc.DecodeParams[rpc.HelloParams](raw)
		check(h, err)
		m, err := rpc.DecodeParams[rpc.MutateParams](raw)
		check(m, err)
		if err == nil {
			b, _ := json.Marshal(m)
			if _, err := rpc.DecodeParams[rpc.MutateParams](b); err != nil {
				t.Fatalf("accepted params do not survive a round trip: %v", err)
			}
		}
		r, err := rpc.DecodeParams[rpc.ResolveParams](raw)
		check(r, err)
		c, err := rpc.DecodeParams[rpc.CancelParams](raw)
		check(c, err)
	})
}
