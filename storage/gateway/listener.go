package gateway

import (
	"net"
	"sync"
)

// limitListener serves at most n connections at once; Accept waits for a free one, so that more
// wait in the listener's backlog. Unlike golang.org/x/net/netutil's, a TCP connection keeps its
// *net.TCPConn methods: net/http sends a file's bytes with sendfile(2) only to a connection that
// is an io.ReaderFrom (BenchmarkGatewayScan/local: without it every byte went through two
// copies in user space).
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	release := sync.OnceFunc(func() { <-l.sem })
	if tc, ok := c.(*net.TCPConn); ok {
		return &limitTCPConn{TCPConn: tc, release: release}, nil
	}
	return &limitConn{Conn: c, release: release}, nil
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitTCPConn struct {
	*net.TCPConn
	release func()
}

func (c *limitTCPConn) Close() error {
	err := c.TCPConn.Close()
	c.release()
	return err
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}
