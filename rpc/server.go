package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

// Handler serves one method: params is the raw "params" member (nil when absent).
type Handler func(ctx context.Context, params json.RawMessage) (any, error)

// RouterOptions configures a Router.
type RouterOptions struct {
	// MaxInFlight bounds requests being handled at once on all connections of the router; a request
	// over the bound is answered ErrOverloaded at once. Default 1024.
	MaxInFlight int
	// MaxResult bounds a marshaled result; a larger one is answered ErrFrameTooLarge instead. Keep it
	// at most the connections' MaxFrame minus 256 bytes of envelope. Default DefaultMaxFrame - 256.
	MaxResult int
	// Observe, if set, is called after each answered request with its method (or "unknown"), the
	// code sent (0 for success) and the time spent.
	Observe func(method string, code Code, elapsed time.Duration)
	// Track, if set, runs before every request to a registered method. A non-nil error is the
	// answer (e.g. shutting down); otherwise done is called once the answer has been written, so a
	// caller can wait for in-flight requests to be answered before it closes the connection.
	Track func(method string) (done func(), err error)
}

// Router dispatches JSON-RPC requests to registered handlers, each in its own goroutine, bounded.
type Router struct {
	methods map[string]Handler
	sem     chan struct{}
	opts    RouterOptions
}

// NewRouter returns an empty router.
func NewRouter(opts RouterOptions) *Router {
	if opts.MaxInFlight <= 0 {
		opts.MaxInFlight = 1024
	}
	if opts.MaxResult <= 0 {
		opts.MaxResult = DefaultMaxFrame - 256
	}
	return &Router{methods: make(map[string]Handler), sem: make(chan struct{}, opts.MaxInFlight), opts: opts}
}

// Handle registers h for method. Registering a method twice panics (a programming error).
func (r *Router) Handle(method string, h Handler) {
	if _, dup := r.methods[method]; dup {
		panic("rpc: method registered twice: " + method)
	}
	r.methods[method] = h
}

// Register registers a typed handler: params are decoded strictly (unknown fields are an error)
// into P, validated when P implements Validator, and any decode or validation failure is answered
// with ErrInvalidParams before fn runs.
func Register[P any, R any](r *Router, method string, fn func(context.Context, P) (R, error)) {
	r.Handle(method, func(ctx context.Context, raw json.RawMessage) (any, error) {
		p, err := DecodeParams[P](raw)
		if err != nil {
			return nil, err
		}
		return fn(ctx, p)
	})
}

// DecodeParams decodes raw strictly into P and validates it. Absent or null params decode to the
// zero P (then validated). Errors wrap ErrInvalidParams.
func DecodeParams[P any](raw json.RawMessage) (P, error) {
	var p P
	if len(bytes.TrimSpace(raw)) != 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return p, fmt.Errorf("%w: %v", ErrInvalidParams, err)
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return p, fmt.Errorf("%w: trailing data after params", ErrInvalidParams)
		}
	}
	if v, ok := any(p).(Validator); ok {
		if err := v.Validate(); err != nil {
			return p, fmt.Errorf("%w: %w", ErrInvalidParams, err)
		}
	} else if v, ok := any(&p).(Validator); ok {
		if err := v.Validate(); err != nil {
			return p, fmt.Errorf("%w: %w", ErrInvalidParams, err)
		}
	}
	return p, nil
}

// ServeConn serves the router on rwc until the peer disconnects or ctx ends; the returned
// connection's DisconnectNotify tells when.
func (r *Router) ServeConn(ctx context.Context, rwc io.ReadWriteCloser, opts StreamOptions) *jsonrpc2.Conn {
	opts.FailOnBadFrame = false
	stream := NewStream(rwc, opts)
	conn := jsonrpc2.NewConn(ctx, stream, dispatcher{r: r, stream: stream}, jsonrpc2.SetLogger(discardLogger{}))
	go func() {
		select {
		case <-ctx.Done():
			conn.Close()
		case <-conn.DisconnectNotify():
		}
	}()
	return conn
}

// dispatcher adapts a Router to jsonrpc2.Handler.
type dispatcher struct {
	r      *Router
	stream *Stream
}

// Handle implements jsonrpc2.Handler. It runs on the connection's read loop, so it only admits the
// request and hands it to a goroutine.
func (d dispatcher) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	r := d.r
	if req.Notif {
		return // the sidecar defines no host → sidecar notifications; ignored per JSON-RPC 2.0
	}
	select {
	case r.sem <- struct{}{}:
	default:
		r.reply(d.stream, req, time.Now(), nil, fmt.Errorf("%w: %d requests in flight", ErrOverloaded, cap(r.sem)))
		return
	}
	start := time.Now()
	done := func() {}
	if _, known := r.methods[req.Method]; known && r.opts.Track != nil {
		finish, err := r.opts.Track(req.Method)
		if err != nil {
			<-r.sem
			r.reply(d.stream, req, start, nil, err)
			return
		}
		done = finish
	}
	go func() {
		defer func() { <-r.sem }()
		defer done()
		peer := &Peer{conn: conn, replied: make(chan struct{})}
		result, err := r.call(context.WithValue(ctx, peerKey{}, peer), req)
		r.reply(d.stream, req, start, result, err)
		close(peer.replied)
	}()
}

func (r *Router) call(ctx context.Context, req *jsonrpc2.Request) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: handler for %s panicked", ErrInternal, req.Method)
		}
	}()
	h, ok := r.methods[req.Method]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrMethodNotFound, clip([]byte(req.Method)))
	}
	var raw json.RawMessage
	if req.Params != nil {
		raw = *req.Params
	}
	return h(ctx, raw)
}

// reply writes the answer straight to the stream: the result is marshaled once, where jsonrpc2's
// own path would marshal it three times (result, Response, frame). The stream's write lock keeps it
// atomic with respect to jsonrpc2's own writes; a closed connection has nobody to tell.
func (r *Router) reply(stream *Stream, req *jsonrpc2.Request, start time.Time, result any, err error) {
	id, _ := req.ID.MarshalJSON()
	var body []byte
	if err == nil {
		b, merr := json.Marshal(result)
		switch {
		case merr != nil:
			err = fmt.Errorf("%w: marshal result: %v", ErrInternal, merr)
		case len(b) > r.opts.MaxResult:
			err = fmt.Errorf("%w: result of %d bytes exceeds %d", ErrFrameTooLarge, len(b), r.opts.MaxResult)
		default:
			body = make([]byte, 0, len(b)+len(id)+40)
			body = append(body, `{"jsonrpc":"2.0","id":`...)
			body = append(body, id...)
			body = append(body, `,"result":`...)
			body = append(body, b...)
			body = append(body, '}')
		}
	}
	var code Code
	if err != nil {
		we := ToWire(err)
		code = Code(we.Code)
		msg, _ := json.Marshal(we.Message)
		body = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%s}}`, id, we.Code, msg)
	}
	// Observed before the answer leaves: a host that reads metrics right after an answer must
	// find the call counted.
	if r.opts.Observe != nil {
		method := req.Method
		if _, known := r.methods[method]; !known {
			method = "unknown"
		}
		r.opts.Observe(method, code, time.Since(start))
	}
	_ = stream.writeFrame(body)
}

// Peer is the connection a request arrived on, for notifications back to the host.
type Peer struct {
	conn    *jsonrpc2.Conn
	replied chan struct{} // closed once the request's answer has been written
}

type peerKey struct{}

// PeerFrom returns the connection a handler's request arrived on, or nil outside a handler.
func PeerFrom(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

// Notify sends a notification to the peer. A closed peer is not an error worth reporting.
func (p *Peer) Notify(ctx context.Context, method string, params any) error {
	if p == nil {
		return nil
	}
	return p.conn.Notify(ctx, method, params)
}

// Replied is closed once the answer to the handler's request has been written to the connection
// (or its write failed), so that work the answer should not wait behind can start after it. A
// nil Peer's is closed already.
func (p *Peer) Replied() <-chan struct{} {
	if p == nil {
		return closedCh
	}
	return p.replied
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done is closed when the peer disconnects.
func (p *Peer) Done() <-chan struct{} { return p.conn.DisconnectNotify() }

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
