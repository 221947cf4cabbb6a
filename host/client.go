package host

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/cba1309c/steward/rpc"
)

// Client talks to one running sidecar, whichever transport started it.
type Client struct {
	rpc   *rpc.Client
	hello rpc.HelloResult
	proc  process

	closeOnce sync.Once
	closeErr  error
}

// process is the transport-specific part: how the sidecar was started and how it is stopped.
type process interface {
	pid() int
	exited() <-chan struct{}
	// kill stops the sidecar: wait up to grace for it to exit by itself, then SIGKILL, then reap.
	kill(ctx context.Context) error
}

// connect runs the JSON-RPC client over rwc, whichever transport carries it, and completes the
// hello handshake within cfg.StartTimeout. The connection itself outlives ctx.
func connect(ctx context.Context, cfg Config, rwc io.ReadWriteCloser, framing rpc.Framing, p process) (*Client, error) {
	c := rpc.NewClient(context.WithoutCancel(ctx), rwc, rpc.ClientOptions{
		Stream:   rpc.StreamOptions{Framing: framing, MaxFrame: cfg.MaxFrame},
		OnNotify: cfg.OnNotify,
	})
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	cl := &Client{rpc: c, proc: p}
	h, err := cl.Hello(ctx)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("%w: hello: %w", ErrLaunch, err)
	}
	cl.hello = h
	return cl, nil
}

// Hello performs the steward.hello handshake again and returns the sidecar's description.
func (c *Client) Hello(ctx context.Context) (rpc.HelloResult, error) {
	var res rpc.HelloResult
	err := c.rpc.Call(ctx, rpc.MethodHello, rpc.HelloParams{ProtocolVersion: rpc.ProtocolVersion, Client: "steward-host"}, &res)
	if err != nil {
		return res, err
	}
	if c.hello.Epoch != "" && res.Epoch != c.hello.Epoch {
		return res, fmt.Errorf("%w: epoch changed from %s to %s", ErrIdentity, c.hello.Epoch, res.Epoch)
	}
	return res, nil
}

// Epoch is the sidecar epoch learned at launch.
func (c *Client) Epoch() string { return c.hello.Epoch }

// Info is the hello result learned at launch.
func (c *Client) Info() rpc.HelloResult { return c.hello }

// Pid is the sidecar's process id (for logs and tests; the client never signals by pid).
func (c *Client) Pid() int { return c.proc.pid() }

// Exited is closed when the sidecar process has exited and been reaped.
func (c *Client) Exited() <-chan struct{} { return c.proc.exited() }

// Call is the generic typed call, for methods without a dedicated wrapper.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.rpc.Call(ctx, method, params, result)
}

// Metrics returns the sidecar's Prometheus text exposition.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var res rpc.MetricsResult
	if err := c.rpc.Call(ctx, rpc.MethodMetrics, rpc.MetricsParams{}, &res); err != nil {
		return "", err
	}
	return res.Text, nil
}

// Shutdown asks the sidecar to stop gracefully and waits until it has exited.
func (c *Client) Shutdown(ctx context.Context, reason string) error {
	var res rpc.ShutdownResult
	if err := c.rpc.Call(ctx, rpc.MethodShutdown, rpc.ShutdownParams{Reason: reason}, &res); err != nil {
		return err
	}
	// The sidecar now refuses new work and drains; Close lets it finish and exit (stdin EOF or
	// go-plugin's Quit), with SIGKILL only after KillGrace.
	return c.Close()
}

// Close ends the connection and stops the sidecar (gracefully, then by SIGKILL after KillGrace).
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.rpc.Close()
		c.closeErr = c.proc.kill(context.Background())
	})
	return c.closeErr
}
