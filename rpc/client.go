package rpc

import (
	"context"
	"encoding/json"
	"io"

	"github.com/sourcegraph/jsonrpc2"
)

// ClientOptions configures NewClient.
type ClientOptions struct {
	// Stream configures framing and the frame bound; FailOnBadFrame is always on for clients.
	Stream StreamOptions
	// OnNotify, if set, receives every notification from the sidecar (e.g. $/progress). It runs on
	// the connection's read loop: it must not block.
	OnNotify func(method string, params json.RawMessage)
}

// Client is the calling side of a steward connection. Errors from Call wrap the sentinels of
// errors.go (errors.Is), ErrConnectionLost, or the caller's context error.
type Client struct {
	conn *jsonrpc2.Conn
}

// NewClient starts a client over rwc. Close it to release the connection.
func NewClient(ctx context.Context, rwc io.ReadWriteCloser, opts ClientOptions) *Client {
	opts.Stream.FailOnBadFrame = true
	h := jsonrpc2.HandlerWithError(func(_ context.Context, _ *jsonrpc2.Conn, req *jsonrpc2.Request) (any, error) {
		if req.Notif && opts.OnNotify != nil {
			var raw json.RawMessage
			if req.Params != nil {
				raw = *req.Params
			}
			opts.OnNotify(req.Method, raw)
			return nil, nil
		}
		return nil, &jsonrpc2.Error{Code: int64(CodeMethodNotFound), Message: "the host serves no methods"}
	})
	conn := jsonrpc2.NewConn(ctx, NewStream(rwc, opts.Stream), h, jsonrpc2.SetLogger(discardLogger{}))
	return &Client{conn: conn}
}

// Call sends one request and waits for its answer into result (which may be nil).
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return FromWire(c.conn.Call(ctx, method, params, result))
}

// Done is closed when the connection is gone.
func (c *Client) Done() <-chan struct{} { return c.conn.DisconnectNotify() }

// Close closes the connection; calls in flight fail with ErrConnectionLost.
func (c *Client) Close() error { return c.conn.Close() }
