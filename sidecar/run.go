package sidecar

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cba1309c/steward/plugin"
	"github.com/cba1309c/steward/rpc"
)

// stdio joins the process's stdin and stdout into one connection.
type stdio struct {
	io.Reader
	io.Writer
	closers []io.Closer
}

func (s stdio) Close() error {
	for _, c := range s.closers {
		c.Close()
	}
	return nil
}

// RunStdio serves JSON-RPC on in/out until the host closes in (EOF), the host process exits, ctx
// ends or a shutdown is requested. After EOF, calls already received are still answered (a host may
// half-close: write its requests, close stdin, read the answers); when the host process itself is
// gone there is nobody to answer and the sidecar stops at once.
func (s *Server) RunStdio(ctx context.Context, in io.ReadCloser, out io.WriteCloser) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held := &holdEOF{r: in, eof: make(chan struct{}), release: make(chan struct{})}
	conn := s.ServeConn(ctx, stdio{Reader: held, Writer: out, closers: []io.Closer{in, out}}, s.cfg.Framing)
	s.log.Info("serving", "transport", "stdio", "framing", s.cfg.Framing.String(), "epoch", s.epoch)
	parent := s.parentGone(ctx)
	hostGone := false
	select {
	case <-held.eof:
		s.Shutdown("stdin closed: host went away")
	case <-conn.DisconnectNotify():
		s.Shutdown("stdio connection closed")
	case <-parent:
		s.Shutdown("host process exited")
		hostGone = true
	case <-ctx.Done():
		s.Shutdown("context ended")
	case <-s.stop:
	}
	if !hostGone {
		s.drain(parent)
	}
	held.releaseOnce()
	conn.Close()
}

// holdEOF delays the end of input until the sidecar has answered what it received: jsonrpc2 closes
// the whole connection, output included, as soon as its reader sees EOF.
type holdEOF struct {
	r       io.Reader
	eof     chan struct{}
	eofOnce sync.Once
	release chan struct{}
	relOnce sync.Once
}

func (h *holdEOF) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if err != nil {
		h.eofOnce.Do(func() { close(h.eof) })
		<-h.release
	}
	return n, err
}

func (h *holdEOF) releaseOnce() { h.relOnce.Do(func() { close(h.release) }) }

// RunPlugin serves through go-plugin until the host asks the plugin to quit, the go-plugin session
// is lost, the host process exits, ctx ends or a shutdown is requested.
func (s *Server) RunPlugin(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		lost  = make(chan struct{}, 1)
	)
	serve := func(c net.Conn) {
		mu.Lock()
		conns[c] = struct{}{}
		mu.Unlock()
		conn := s.ServeConn(ctx, c, rpc.ContentLength)
		<-conn.DisconnectNotify()
		mu.Lock()
		delete(conns, c)
		last := len(conns) == 0
		mu.Unlock()
		if last {
			select {
			case lost <- struct{}{}:
			default:
			}
		}
	}
	parent := s.parentGone(ctx)
	quit := make(chan struct{})
	go func() {
		plugin.Serve(serve)
		close(quit)
	}()
	s.log.Info("serving", "transport", "go-plugin", "epoch", s.epoch)
	select {
	case <-quit:
		s.Shutdown("go-plugin host asked the plugin to quit")
	case <-lost:
		s.Shutdown("go-plugin session lost")
	case <-parent:
		s.Shutdown("host process exited")
	case <-ctx.Done():
		s.Shutdown("context ended")
	case <-s.stop:
		// steward.shutdown: drain, then give the go-plugin host a moment to send its Quit so its
		// Kill sees a graceful exit rather than a vanished plugin.
		s.drain(parent)
		select {
		case <-quit:
		case <-parent:
		case <-time.After(time.Second):
		}
	}
	s.drain(parent)
	mu.Lock()
	for c := range conns {
		c.Close()
	}
	mu.Unlock()
}

// parentGone is closed when the process that started the sidecar exits (never, if disabled).
func (s *Server) parentGone(ctx context.Context) <-chan struct{} {
	if s.cfg.DisableParentWatch {
		return nil
	}
	ch, err := watchParent(ctx)
	if err != nil {
		s.log.Warn("cannot watch the host process; relying on stdin/session loss", "error", err)
		return nil
	}
	return ch
}
