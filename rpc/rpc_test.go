package rpc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
)

type echoParams struct {
	Text string `json:"text"`
	N    int    `json:"n,omitempty"`
}

func (p echoParams) Validate() error {
	if p.N < 0 {
		return errors.New("n must not be negative")
	}
	return nil
}

func newRouter() *rpc.Router {
	r := rpc.NewRouter(rpc.RouterOptions{})
	rpc.Register(r, "test.echo", func(_ context.Context, p echoParams) (echoParams, error) { return p, nil })
	rpc.Register(r, "test.busy", func(_ context.Context, _ struct{}) (any, error) {
		return nil, fmt.Errorf("admission: %w", rpc.ErrOverloaded)
	})
	return r
}

// rawPeer speaks raw frames to a served router, so tests can send what a Go client never would.
type rawPeer struct {
	t       *testing.T
	conn    net.Conn
	r       *bufio.Reader
	framing rpc.Framing
}

func serve(t *testing.T, framing rpc.Framing, maxFrame int) *rawPeer {
	t.Helper()
	server, client := socketPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	conn := newRouter().ServeConn(ctx, server, rpc.StreamOptions{Framing: framing, MaxFrame: maxFrame})
	t.Cleanup(func() {
		client.Close()
		cancel()
		<-conn.DisconnectNotify()
	})
	return &rawPeer{t: t, conn: client, r: bufio.NewReader(client), framing: framing}
}

func (p *rawPeer) send(body string) {
	p.t.Helper()
	var frame string
	if p.framing == rpc.ContentLength {
		frame = fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
	} else {
		frame = body + "\n"
	}
	p.sendRaw(frame)
}

func (p *rawPeer) sendRaw(frame string) {
	p.t.Helper()
	p.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(p.conn, frame); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (p *rawPeer) recv() response {
	p.t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var body []byte
	if p.framing == rpc.ContentLength {
		length := -1
		for {
			line, err := p.r.ReadString('\n')
			if err != nil {
				p.t.Fatalf("read header: %v", err)
			}
			line = strings.TrimRight(line, "\r\n")
			if line == "" {
				break
			}
			if v, ok := strings.CutPrefix(line, "Content-Length: "); ok {
				length, _ = strconv.Atoi(v)
			}
		}
		body = make([]byte, length)
		if _, err := io.ReadFull(p.r, body); err != nil {
			p.t.Fatalf("read body: %v", err)
		}
	} else {
		line, err := p.r.ReadBytes('\n')
		if err != nil {
			p.t.Fatalf("read line: %v", err)
		}
		body = line
	}
	var resp response
	if err := json.Unmarshal(body, &resp); err != nil {
		p.t.Fatalf("response %q: %v", body, err)
	}
	if resp.JSONRPC != "2.0" {
		p.t.Fatalf("response without jsonrpc 2.0: %s", body)
	}
	return resp
}

func (p *rawPeer) expectError(id string, code rpc.Code) {
	p.t.Helper()
	resp := p.recv()
	if resp.Error == nil {
		p.t.Fatalf("want error %d, got result %s", code, resp.Result)
	}
	if rpc.Code(resp.Error.Code) != code {
		p.t.Fatalf("want error code %d, got %d (%s)", code, resp.Error.Code, resp.Error.Message)
	}
	if string(resp.ID) != id {
		p.t.Fatalf("want id %s, got %s", id, resp.ID)
	}
}

func (p *rawPeer) expectEcho(id, text string) {
	p.t.Helper()
	resp := p.recv()
	if resp.Error != nil {
		p.t.Fatalf("want result, got error %d %s", resp.Error.Code, resp.Error.Message)
	}
	var got echoParams
	if err := json.Unmarshal(resp.Result, &got); err != nil || got.Text != text || string(resp.ID) != id {
		p.t.Fatalf("want echo %q id %s, got %s id %s", text, id, resp.Result, resp.ID)
	}
}

func TestBadMessagesGetErrorsAndConnectionKeepsServing(t *testing.T) {
	const maxFrame = 1024
	big := strings.Repeat("x", 2*maxFrame)
	cases := []struct {
		name   string
		body   string // sent with the connection's framing
		raw    string // sent as is, instead of body
		wantID string
		want   rpc.Code
	}{
		{name: "malformed JSON", body: `{"jsonrpc":"2.0","id":1,"method":`, wantID: "null", want: rpc.CodeParseError},
		{name: "not an object", body: `42`, wantID: "null", want: rpc.CodeInvalidRequest},
		{name: "batch", body: `[{"jsonrpc":"2.0","id":1,"method":"test.echo"}]`, wantID: "null", want: rpc.CodeInvalidRequest},
		{name: "neither request nor response", body: `{"jsonrpc":"2.0","id":7}`, wantID: "7", want: rpc.CodeInvalidRequest},
		{name: "unknown method", body: `{"jsonrpc":"2.0","id":2,"method":"no.such"}`, wantID: "2", want: rpc.CodeMethodNotFound},
		{name: "mistyped params", body: `{"jsonrpc":"2.0","id":3,"method":"test.echo","params":{"text":5}}`, wantID: "3", want: rpc.CodeInvalidParams},
		{name: "unknown field", body: `{"jsonrpc":"2.0","id":4,"method":"test.echo","params":{"txt":"a"}}`, wantID: "4", want: rpc.CodeInvalidParams},
		{name: "failed validation", body: `{"jsonrpc":"2.0","id":"s5","method":"test.echo","params":{"text":"a","n":-1}}`, wantID: `"s5"`, want: rpc.CodeInvalidParams},
		{name: "oversized frame", body: `{"id":6,"jsonrpc":"2.0","method":"test.echo","params":{"text":"` + big + `"}}`, wantID: "6", want: rpc.CodeFrameTooLarge},
		{name: "domain sentinel", body: `{"jsonrpc":"2.0","id":8,"method":"test.busy"}`, wantID: "8", want: rpc.CodeOverloaded},
	}
	for _, framing := range []rpc.Framing{rpc.ContentLength, rpc.NewlineDelimited} {
		t.Run(framing.String(), func(t *testing.T) {
			p := serve(t, framing, maxFrame)
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					p.t = t
					p.send(tc.body)
					p.expectError(tc.wantID, tc.want)
					// The same connection answers the next valid call.
					p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"test.echo","params":{"text":"ok%d"}}`, 100+i, i))
					p.expectEcho(strconv.Itoa(100+i), fmt.Sprintf("ok%d", i))
				})
			}
		})
	}
}

func TestContentLengthHeaderErrorsResync(t *testing.T) {
	cases := []struct{ name, raw string }{
		{"bad length", "Content-Length: abc\r\n\r\n{}"},
		{"no length", "Content-Type: x\r\n\r\n{\"id\":1}"},
		{"no colon", "garbage line\r\n\r\n"},
		{"huge header line", strings.Repeat("H", 5000) + "\r\n\r\n"},
	}
	p := serve(t, rpc.ContentLength, 1024)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.t = t
			p.sendRaw(tc.raw)
			p.expectError("null", rpc.CodeInvalidRequest)
			p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"test.echo","params":{"text":"after"}}`, i))
			p.expectEcho(strconv.Itoa(i), "after")
		})
	}
}

func TestClientSeesTypedSentinels(t *testing.T) {
	server, client := socketPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sconn := newRouter().ServeConn(ctx, server, rpc.StreamOptions{MaxFrame: 512})
	c := rpc.NewClient(ctx, client, rpc.ClientOptions{Stream: rpc.StreamOptions{MaxFrame: 512}})

	var out echoParams
	if err := c.Call(ctx, "test.echo", echoParams{Text: "hi"}, &out); err != nil || out.Text != "hi" {
		t.Fatalf("echo: %v %+v", err, out)
	}
	checks := []struct {
		name   string
		method string
		params any
		want   error
	}{
		{"method not found", "nope", nil, rpc.ErrMethodNotFound},
		{"invalid params", "test.echo", map[string]int{"n": -2}, rpc.ErrInvalidParams},
		{"overloaded", "test.busy", nil, rpc.ErrOverloaded},
		{"frame too large (refused before sending)", "test.echo", echoParams{Text: strings.Repeat("y", 600)}, rpc.ErrFrameTooLarge},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Call(ctx, tc.method, tc.params, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("want errors.Is %v, got %v", tc.want, err)
			}
			for _, other := range []error{rpc.ErrMethodNotFound, rpc.ErrInvalidParams, rpc.ErrOverloaded, rpc.ErrFrameTooLarge} {
				if other != tc.want && errors.Is(err, other) {
					t.Fatalf("%v also matches %v", err, other)
				}
			}
		})
	}
	c.Close()
	<-sconn.DisconnectNotify()
	if err := c.Call(ctx, "test.echo", echoParams{}, nil); !errors.Is(err, rpc.ErrConnectionLost) {
		t.Fatalf("call on closed client: want ErrConnectionLost, got %v", err)
	}
}

func TestOverloadedWhenInFlightBoundReached(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 2)
	r := rpc.NewRouter(rpc.RouterOptions{MaxInFlight: 2})
	rpc.Register(r, "test.block", func(ctx context.Context, _ struct{}) (int, error) {
		entered <- struct{}{}
		<-release
		return 1, nil
	})
	c := clientOf(t, r)
	ctx := context.Background()
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() { errs <- c.Call(ctx, "test.block", nil, nil) }()
	}
	<-entered
	<-entered
	callCtx, cancelCall := context.WithTimeout(ctx, 10*time.Second)
	defer cancelCall()
	if err := c.Call(callCtx, "test.block", nil, nil); !errors.Is(err, rpc.ErrOverloaded) {
		t.Fatalf("third call: want ErrOverloaded, got %v", err)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("blocked call: %v", err)
		}
	}
}

// clientOf serves r on a socket pair and returns a client of it; both end at cleanup.
func clientOf(t *testing.T, r *rpc.Router) *rpc.Client {
	t.Helper()
	server, client := socketPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	sconn := r.ServeConn(ctx, server, rpc.StreamOptions{})
	c := rpc.NewClient(ctx, client, rpc.ClientOptions{})
	t.Cleanup(func() {
		c.Close()
		<-sconn.DisconnectNotify()
		cancel()
	})
	return c
}

func TestToWireMapsEverySentinel(t *testing.T) {
	seen := map[int64]bool{}
	for _, s := range []*rpc.Sentinel{rpc.ErrParse, rpc.ErrInvalidRequest, rpc.ErrMethodNotFound, rpc.ErrInvalidParams,
		rpc.ErrInternal, rpc.ErrOverloaded, rpc.ErrDeadlineUnfundable, rpc.ErrIsolationUnavailable, rpc.ErrShuttingDown,
		rpc.ErrUnsupportedProtocol, rpc.ErrFrameTooLarge, rpc.ErrDuplicateOwner, rpc.ErrLedgerFull, rpc.ErrUnknownOwner,
		rpc.ErrNameOwned, rpc.ErrStorageUnavailable, rpc.ErrNotFound} {
		w := rpc.ToWire(fmt.Errorf("layer: %w", s))
		if w.Code != int64(s.Code()) {
			t.Errorf("%v: wire code %d, want %d", s, w.Code, s.Code())
		}
		if seen[w.Code] {
			t.Errorf("code %d used twice", w.Code)
		}
		seen[w.Code] = true
		back := rpc.FromWire(w)
		if !errors.Is(back, s) {
			t.Errorf("%v does not survive the round trip: %v", s, back)
		}
	}
	if w := rpc.ToWire(errors.New("plain")); w.Code != int64(rpc.CodeInternal) {
		t.Errorf("unclassified error: code %d, want internal", w.Code)
	}
}

// Peer.Replied is open while the handler runs and closed once its answer has been written; a nil
// Peer's (outside a handler) is closed.
func TestPeerRepliedAfterTheAnswer(t *testing.T) {
	select {
	case <-(*rpc.Peer)(nil).Replied():
	default:
		t.Fatal("nil Peer: Replied is not closed")
	}
	peers := make(chan *rpc.Peer, 1)
	openInHandler := make(chan bool, 1)
	r := rpc.NewRouter(rpc.RouterOptions{})
	rpc.Register(r, "test.peer", func(ctx context.Context, _ struct{}) (int, error) {
		p := rpc.PeerFrom(ctx)
		open := p != nil
		if open {
			select {
			case <-p.Replied():
				open = false
			default:
			}
		}
		openInHandler <- open
		peers <- p
		return 1, nil
	})
	c := clientOf(t, r)
	var got int
	if err := c.Call(context.Background(), "test.peer", nil, &got); err != nil || got != 1 {
		t.Fatalf("call: %v %d", err, got)
	}
	if !<-openInHandler {
		t.Fatal("Replied was closed (or no Peer) while the handler ran")
	}
	select {
	case <-(<-peers).Replied():
	case <-time.After(10 * time.Second):
		t.Fatal("Replied not closed after the answer arrived")
	}
}
