package isolation

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The gateway listener: a TCP socket that lives in a contained domain's own network namespace
// (Spec.Gateway), so that only that domain can reach it, accepted on by the supervisor.
//
// A socket belongs to the namespace it was created in, whoever holds it, so the domain creates
// it and hands it over; the supervisor never enters the namespace. The hand-off, per domain:
//
//  1. launch: a SOCK_SEQPACKET pair; the child's end is one more inherited descriptor
//     (EnvGatewayFD, after the barrier's), never one of Spec.ExtraFiles.
//  2. EnterWorker, contained, past the barrier and before Contain (the child is still root of
//     its user namespace, with CAP_NET_ADMIN over its network namespace): brings lo up, binds
//     127.0.0.1:<EnvGatewayPort>, listens, sends the listener (SCM_RIGHTS) — or, failing, the
//     error's text without a descriptor — and closes both descriptors. No engine code has run;
//     the domain keeps no copy of the listener and no end of the pair.
//  3. Domain.Gateway: receives it (once), checks it is what was asked for, and wraps it.
//
// Contain then allows TCP connect to that port only and no TCP bind (Landlock), and no socket
// families but unix, inet, inet6 and netlink (seccomp).

// gatewayBacklog is the listener's backlog: an engine opens a few connections per request
// (ranged GETs in parallel, a multipart upload), well under it.
const gatewayBacklog = 128

// maxGatewayMessage bounds the child's error text.
const maxGatewayMessage = 1024

// gateway is the supervisor's side of a domain's hand-off.
type gateway struct {
	port uint16
	mode Mode

	mu     sync.Mutex   // serialises the receive and close
	pair   *os.File     // our end of the hand-off pair, nil once done with
	wake   *os.File     // pair, for close to wake a receive it cannot lock out
	ending atomic.Bool  // close has begun: a receive gives up
	l      net.Listener // the listener once received
	err    error        // a failed hand-off, for good
	closed bool
}

// newGateway makes the hand-off pair: ours non-blocking (the runtime's poller serves it, so a
// wait is bounded by a deadline), theirs blocking for the child.
func newGateway(port uint16, mode Mode) (*gateway, *os.File, error) {
	p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, opErr("gateway socketpair", mode, "", ErrGateway, err)
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, opErr("gateway socketpair", mode, "", ErrGateway, err)
	}
	ours := os.NewFile(uintptr(p[0]), "gateway-handoff")
	g := &gateway{port: port, mode: mode, pair: ours, wake: ours}
	return g, os.NewFile(uintptr(p[1]), "gateway-handoff-child"), nil
}

// Gateway returns the listener of a domain started with Spec.Gateway: a TCP socket bound to
// 127.0.0.1:<Spec.Gateway> in the domain's own network namespace, which only the domain can
// connect to. The first call waits for the domain to hand it over (EnterWorker does, before any
// engine code runs), at most until ctx ends; a ctx error may be retried. A domain that fails
// the hand-off (it exited, or could not listen) gives an *Error wrapping ErrGateway, for good:
// the caller kills it. Later calls return the same listener. Closing it is the caller's; Close
// closes it too if still open.
func (d *Domain) Gateway(ctx context.Context) (net.Listener, error) {
	if d.gw == nil {
		return nil, opErr("gateway", "", "", ErrGateway, errors.New("the domain was started without Spec.Gateway"))
	}
	return d.gw.listener(ctx)
}

func (g *gateway) listener(ctx context.Context) (net.Listener, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.l != nil || g.err != nil:
		return g.l, g.err
	case g.closed:
		return nil, ErrClosed
	}
	fd, err := g.receive(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.fail(err)
		}
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "gateway")
	l, err := net.FileListener(f) // a duplicate, non-blocking, served by the poller
	f.Close()
	if err != nil {
		g.fail(opErr("gateway listener", g.mode, "", ErrGateway, err))
		return nil, g.err
	}
	g.l = l
	g.pair.Close()
	g.pair = nil
	return l, nil
}

// fail records err for good and closes our end of the pair.
func (g *gateway) fail(err error) {
	g.err = err
	if g.pair != nil {
		g.pair.Close()
		g.pair = nil
	}
}

// receive reads the child's one message: the listener, checked, or the error it reports.
func (g *gateway) receive(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	fail := func(err error) (int, error) { return -1, opErr("gateway hand-off", g.mode, "", ErrGateway, err) }
	_ = g.pair.SetReadDeadline(time.Time{})
	if g.ending.Load() { // after the reset: a close that set its deadline before it is seen here
		return -1, ErrClosed
	}
	stop := context.AfterFunc(ctx, func() { _ = g.pair.SetReadDeadline(time.Now()) })
	defer stop()
	rc, err := g.pair.SyscallConn()
	if err != nil {
		return fail(err)
	}
	buf := make([]byte, maxGatewayMessage)
	oob := make([]byte, unix.CmsgSpace(4*4)) // room to see (and close) a wrong count
	var n, oobn, flags int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return !errors.Is(rerr, unix.EAGAIN)
	})
	switch {
	case err != nil && g.ending.Load():
		return -1, ErrClosed
	case err != nil && ctx.Err() != nil:
		return -1, ctx.Err()
	case err != nil:
		return fail(err)
	}
	if rerr != nil {
		return fail(rerr)
	}
	fds := rightsOf(oob[:oobn])
	switch {
	case len(fds) == 0 && n == 0:
		return fail(errors.New("the domain ended before it handed its listener over"))
	case len(fds) == 0:
		return fail(fmt.Errorf("the domain could not listen: %s", buf[:n]))
	case len(fds) != 1 || flags&unix.MSG_CTRUNC != 0:
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fail(fmt.Errorf("%d descriptors handed over, want 1", len(fds)))
	}
	if err := checkGatewaySocket(fds[0], g.port); err != nil {
		unix.Close(fds[0])
		return fail(err)
	}
	return fds[0], nil
}

// checkGatewaySocket proves fd is what the supervisor is about to serve storage on: a
// listening TCP socket on 127.0.0.1:port.
func checkGatewaySocket(fd int, port uint16) error {
	want := map[int]int{unix.SO_DOMAIN: unix.AF_INET, unix.SO_TYPE: unix.SOCK_STREAM, unix.SO_ACCEPTCONN: 1}
	for opt, v := range want {
		got, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, opt)
		if err != nil {
			return fmt.Errorf("handed-over socket: getsockopt %d: %w", opt, err)
		}
		if got != v {
			return fmt.Errorf("handed-over socket: option %d is %d, want %d", opt, got, v)
		}
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("handed-over socket: getsockname: %w", err)
	}
	in, ok := sa.(*unix.SockaddrInet4)
	if !ok || in.Port != int(port) || in.Addr != [4]byte{127, 0, 0, 1} {
		return fmt.Errorf("handed-over socket is bound to %v, want 127.0.0.1:%d", sa, port)
	}
	return nil
}

// close closes the listener if the caller has not, and our end of the pair. Idempotent. A
// Gateway call waiting for the hand-off returns ErrClosed at once.
func (g *gateway) close() {
	if g == nil {
		return
	}
	g.ending.Store(true)
	_ = g.wake.SetReadDeadline(time.Unix(1, 0)) // fails harmlessly once the pair is closed
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.l != nil {
		_ = g.l.Close() // net.ErrClosed if the caller did: harmless
	}
	if g.pair != nil {
		g.pair.Close()
		g.pair = nil
	}
}

// checkGateway validates Spec.Gateway against the rest of the spec and the supervisor.
func (spec Spec) checkGateway(contained bool) error {
	switch {
	case spec.Gateway == 0:
		return nil
	case spec.Network:
		return fmt.Errorf("%w: Spec.Gateway needs a domain without network (Network false)", ErrInvalidSpec)
	case !contained:
		return opErr("gateway", "", "", ErrContainment, fmt.Errorf("%w: Spec.Gateway needs contained domains (a network namespace of their own)", ErrInvalidSpec))
	}
	return nil
}

// handOffGateway is the domain's side (step 2 above), run by EnterWorker when the launch asked
// for a gateway. It closes the pair's end whatever happens.
func handOffGateway() error {
	s, ps := os.Getenv(EnvGatewayFD), os.Getenv(EnvGatewayPort)
	if s == "" {
		return nil
	}
	_ = os.Unsetenv(EnvGatewayFD)
	_ = os.Unsetenv(EnvGatewayPort)
	fd, err := strconv.Atoi(s)
	if err != nil || fd < FirstExtraFD {
		return fmt.Errorf("%w: bad %s=%q", ErrGateway, EnvGatewayFD, s)
	}
	defer unix.Close(fd)
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil || port == 0 {
		return fmt.Errorf("%w: bad %s=%q", ErrGateway, EnvGatewayPort, ps)
	}
	lfd, err := gatewayListen(uint16(port))
	if err != nil {
		msg := []byte(err.Error())
		_ = sysRetry(func() error {
			return unix.Sendmsg(fd, msg[:min(len(msg), maxGatewayMessage)], nil, nil, unix.MSG_NOSIGNAL)
		})
		return fmt.Errorf("%w: %w", ErrGateway, err)
	}
	defer unix.Close(lfd) // the supervisor holds the only copy from here on
	if err := sysRetry(func() error { return unix.Sendmsg(fd, []byte{1}, unix.UnixRights(lfd), nil, unix.MSG_NOSIGNAL) }); err != nil {
		return fmt.Errorf("%w: hand the listener over: %w", ErrGateway, err)
	}
	return nil
}

// gatewayListen brings lo up in the domain's network namespace (born with it down) and
// listens on 127.0.0.1:port there.
func gatewayListen(port uint16) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unix.Close(fd)
		}
	}()
	if err := loopbackUp(fd); err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(port), Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return -1, fmt.Errorf("bind 127.0.0.1:%d: %w", port, err)
	}
	if err := unix.Listen(fd, gatewayBacklog); err != nil {
		return -1, fmt.Errorf("listen: %w", err)
	}
	ok = true
	return fd, nil
}

// loopbackUp sets IFF_UP on lo through any socket of the namespace.
func loopbackUp(fd int) error {
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// policy is the launch's Policy: Spec.Policy, plus TCP connect to the gateway's port.
func (spec Spec) policy() Policy {
	if spec.Gateway == 0 {
		return spec.Policy
	}
	return spec.Policy.merge(Policy{Connect: []uint16{spec.Gateway}})
}
