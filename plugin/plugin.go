// Package plugin carries steward's JSON-RPC protocol over hashicorp/go-plugin. go-plugin owns the
// plugin's stdout (handshake, then a log pipe) and its stdin, so JSON-RPC cannot ride them; instead
// the plugin exposes one tiny net/rpc method, Open, which hands out a MuxBroker stream id. The host
// dials that stream and both sides run the same bounded JSON-RPC connection as in stdio mode.
//
// The package knows nothing about what is served: the sidecar passes a function that serves one
// connection, the host gets a net.Conn. It also owns the folders go-plugin sockets live in
// (socketdir.go). It imports no other steward package.
package plugin

import (
	"errors"
	"fmt"
	"net"
	"net/rpc"
	"os"

	goplugin "github.com/hashicorp/go-plugin"
)

// Name is the name under which the steward plugin is dispensed.
const Name = "steward"

// Handshake is the go-plugin handshake shared by host and sidecar. The magic cookie is not a
// secret: it only tells a binary that it was started by a go-plugin host.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "STEWARD_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "3f1a6f4e-steward-sidecar-jsonrpc",
}

// Launched reports whether this process was started by a go-plugin host (the magic cookie is in its
// environment). The sidecar chooses its transport from it.
func Launched() bool {
	return os.Getenv(Handshake.MagicCookieKey) == Handshake.MagicCookieValue
}

// ErrNoStream means the plugin could not hand out or the host could not dial a broker stream.
var ErrNoStream = errors.New("plugin: no broker stream")

// streamPlugin implements goplugin.Plugin for the net/rpc protocol.
type streamPlugin struct {
	serve func(net.Conn) // plugin side only
}

var _ goplugin.Plugin = (*streamPlugin)(nil)

func (p *streamPlugin) Server(b *goplugin.MuxBroker) (any, error) {
	return &opener{broker: b, serve: p.serve}, nil
}

func (p *streamPlugin) Client(b *goplugin.MuxBroker, c *rpc.Client) (any, error) {
	return &Dialer{broker: b, client: c}, nil
}

// opener is the plugin-side net/rpc object.
type opener struct {
	broker *goplugin.MuxBroker
	serve  func(net.Conn)
}

// Open reserves a broker stream, accepts the host's dial on it in the background and serves it.
func (o *opener) Open(_ struct{}, id *uint32) error {
	*id = o.broker.NextId()
	streamID := *id
	go func() {
		conn, err := o.broker.Accept(streamID)
		if err != nil {
			return // the host gave up on this stream; nothing to serve
		}
		o.serve(conn)
	}()
	return nil
}

// Dialer is what the host gets from Dispense: it opens JSON-RPC streams to the plugin.
type Dialer struct {
	broker *goplugin.MuxBroker
	client *rpc.Client
}

// Dial asks the plugin for a stream and connects to it.
func (d *Dialer) Dial() (net.Conn, error) {
	var id uint32
	if err := d.client.Call("Plugin.Open", struct{}{}, &id); err != nil {
		return nil, fmt.Errorf("%w: open: %w", ErrNoStream, err)
	}
	conn, err := d.broker.Dial(id)
	if err != nil {
		return nil, fmt.Errorf("%w: dial stream %d: %w", ErrNoStream, id, err)
	}
	return conn, nil
}

// PluginMap returns the plugin set for a host's ClientConfig.
func PluginMap() map[string]goplugin.Plugin {
	return map[string]goplugin.Plugin{Name: &streamPlugin{}}
}

// Serve serves the steward plugin until go-plugin's control channel says quit. serve is called once
// per stream the host opens, in its own goroutine, and owns the connection. Serve returns when the
// host asks the plugin to quit; other ways down (session loss, shutdown) are the caller's to handle.
func Serve(serve func(net.Conn)) {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         map[string]goplugin.Plugin{Name: &streamPlugin{serve: serve}},
	})
}

// DialStream dispenses the steward plugin from a started go-plugin client and opens one stream.
func DialStream(c goplugin.ClientProtocol) (net.Conn, error) {
	raw, err := c.Dispense(Name)
	if err != nil {
		return nil, fmt.Errorf("%w: dispense: %w", ErrNoStream, err)
	}
	d, ok := raw.(*Dialer)
	if !ok {
		return nil, fmt.Errorf("%w: dispensed %T", ErrNoStream, raw)
	}
	return d.Dial()
}
