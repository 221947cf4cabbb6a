package hostile

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// network tries every way out of the domain a store engine once had: TCP to the test's listener
// and to other addresses on the gateway's port, UDP, a listening socket, socket families the
// engine does not need (vsock, packet, and vsock through the i386 ABI), the host's pathname and
// abstract unix sockets, and its view of the interfaces.
func (r *run) network(_ context.Context) {
	r.emit(r.tcpConnect("net.connect", "connect to the test's TCP listener and send a line", splitList(r.p[ParamListen])))
	r.emit(r.tcpConnect("net.connect-other-addrs", "connect to the test's listeners on 127.0.0.2 and the host's own addresses (the gateway's port among them) and send a line",
		splitList(r.p[ParamTCPTargets])))
	r.emit(r.udpSend())
	r.emit(r.bindListen())
	r.emit(r.interfaces())
	r.emit(socketOf("net.vsock", "socket(AF_VSOCK, SOCK_STREAM)", unix.AF_VSOCK, unix.SOCK_STREAM, 0))
	r.emit(socketOf("net.packet", "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)", unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))))
	r.emit(r.i386Socket())
	r.emit(r.unixHost())
	r.emit(r.unixAbstract())
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// tcpConnect connects to each address and sends a line naming the invocation: the test's
// listeners record what they hear.
func (r *run) tcpConnect(attack, tried string, addrs []string) Finding {
	return r.dialEach(attack, tried+": "+strings.Join(addrs, ", "), "tcp", addrs)
}

// dialEach connects to each address of network, sends a line naming the invocation on every
// connection made, and is Succeeded if one was.
func (r *run) dialEach(attack, tried, network string, addrs []string) Finding {
	f := Finding{Attack: attack, Tried: tried}
	if len(addrs) == 0 {
		f.Verdict, f.Evidence = Inconclusive, "the test named no listener"
		return f
	}
	var ev []string
	var lastErr error
	connected := 0
	for _, a := range addrs {
		c, err := net.DialTimeout(network, a, 3*time.Second)
		if err != nil {
			lastErr = err
			ev = append(ev, fmt.Sprintf("%s: %s", a, errnoOr(err)))
			continue
		}
		connected++
		_, werr := fmt.Fprintf(c, "hostile %s\n", r.inv)
		ev = append(ev, fmt.Sprintf("%s: connected from %s (write: %v)", a, c.LocalAddr(), werr))
		c.Close()
	}
	f.Verdict, f.Evidence = verdict(connected > 0), strings.Join(ev, "; ")
	if connected == 0 {
		f.Errno = errno(lastErr)
	}
	return f
}

func errnoOr(err error) string {
	if e := errno(err); e != "" {
		return e
	}
	return err.Error()
}

// udpSend sends a datagram to each UDP listener of the test. A sendto that returns 0 may have
// gone nowhere (its own network namespace): only the test's listeners can tell, so it is Pending.
func (r *run) udpSend() Finding {
	addrs := splitList(r.p[ParamUDP])
	f := Finding{Attack: "net.udp", Tried: "send a UDP datagram to the test's listeners: " + strings.Join(addrs, ", ")}
	if len(addrs) == 0 {
		f.Verdict, f.Evidence = Inconclusive, "the test named no UDP listener"
		return f
	}
	var ev []string
	sent := 0
	for _, a := range addrs {
		c, err := net.Dial("udp", a)
		if err == nil {
			_, err = fmt.Fprintf(c, "hostile %s\n", r.inv)
			c.Close()
		}
		if err == nil {
			sent++
		}
		ev = append(ev, fmt.Sprintf("%s: %v", a, errOK(err)))
	}
	f.Evidence = strings.Join(ev, "; ")
	f.Verdict = Pending
	if sent == 0 {
		f.Verdict = Blocked
	}
	return f
}

func errOK(err error) string {
	if err == nil {
		return "sent"
	}
	return errnoOr(err)
}

// bindListen binds TCP sockets (an ephemeral port, another port, the gateway's own port with
// SO_REUSEPORT, to steal its connections) and listens.
func (r *run) bindListen() Finding {
	f := Finding{Attack: "net.bind-listen", Tried: "bind and listen on TCP 127.0.0.1:0, 0.0.0.0:7481, and 127.0.0.1:7480 with SO_REUSEADDR+SO_REUSEPORT (the gateway's port)"}
	var ev []string
	var lastErr error
	listened := 0
	for _, a := range []struct {
		addr  [4]byte
		port  int
		reuse bool
	}{{[4]byte{127, 0, 0, 1}, 0, false}, {[4]byte{0, 0, 0, 0}, 7481, false}, {[4]byte{127, 0, 0, 1}, 7480, true}} {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			if a.reuse {
				_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
				_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			}
			err = unix.Bind(fd, &unix.SockaddrInet4{Addr: a.addr, Port: a.port})
			if err == nil {
				err = unix.Listen(fd, 1)
			}
			unix.Close(fd)
		}
		name := net.JoinHostPort(net.IP(a.addr[:]).String(), strconv.Itoa(a.port))
		if err != nil {
			lastErr = err
			ev = append(ev, name+": "+errnoOr(err))
		} else {
			listened++
			ev = append(ev, name+": listening")
		}
	}
	f.Verdict, f.Evidence = verdict(listened > 0), strings.Join(ev, "; ")
	if listened == 0 {
		f.Errno = errno(lastErr)
	}
	return f
}

// interfaces lists the network interfaces the engine sees: anything but lo is a way out.
func (r *run) interfaces() Finding {
	f := Finding{Attack: "net.interfaces", Tried: "list the network interfaces and their addresses (the host's eth0 was visible once)"}
	ifs, err := net.Interfaces()
	if err != nil {
		return blocked(f.Attack, f.Tried, err)
	}
	var ev []string
	foreign := 0
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		ev = append(ev, fmt.Sprintf("%s %v %v", i.Name, i.Flags, addrs))
		if i.Flags&net.FlagLoopback == 0 {
			foreign++
		}
	}
	f.Verdict, f.Evidence = verdict(foreign > 0), strings.Join(ev, "; ")
	return f
}

// socketOf creates a socket the engine has no use for.
func socketOf(attack, tried string, family, typ, proto int) Finding {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, proto)
	return opened(attack, tried, "socket fd", fd, err)
}

// i386Socket makes socket(AF_VSOCK) through int 0x80 in a child (a seccomp filter that kills
// instead of refusing would kill the engine): the i386 system call table is a second way into
// the kernel that a filter written for x86-64 numbers does not see.
func (r *run) i386Socket() Finding {
	const attack, tried = "net.i386-socket", "in a child: socket(AF_VSOCK, SOCK_STREAM) through int 0x80 (the i386 system call ABI), which an x86-64 filter does not match"
	if !haveInt80 {
		return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Evidence: "not an amd64 engine: no i386 ABI to call"}
	}
	out, err := helper("int80").Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Evidence: fmt.Sprintf("the child died of %v (killed by the filter, or no i386 ABI)", ws.Signal())}
		}
	}
	if err != nil {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: fmt.Sprintf("the child failed: %v (%q)", err, out)}
	}
	ret, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if perr != nil {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: fmt.Sprintf("unreadable result %q", out)}
	}
	if ret >= 0 {
		return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("int 0x80 socket returned fd %d", ret)}
	}
	e := syscall.Errno(-ret)
	return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Errno: errno(e), Evidence: fmt.Sprintf("int 0x80 socket returned -%s", errno(e))}
}

// int80Main is the helper "int80": it prints the raw result of the i386 socket call.
func int80Main() int {
	fmt.Println(int80Socket())
	return 0
}

// unixHost connects to the host's pathname unix sockets the test made (mode 0777).
func (r *run) unixHost() Finding {
	paths := splitList(r.p[ParamUnixSockets])
	return r.dialEach("net.unix-host", "connect to the host's pathname unix sockets (mode 0777): "+strings.Join(paths, ", "), "unix", paths)
}

// unixAbstract connects to the test's abstract unix socket (a namespace of the network
// namespace, reachable by name from anywhere in it).
func (r *run) unixAbstract() Finding {
	name := r.p[ParamAbstract]
	f := Finding{Attack: "net.unix-abstract", Tried: "connect to the test's abstract unix socket @" + name}
	if name == "" {
		f.Verdict, f.Evidence = Inconclusive, "the test named no abstract socket"
		return f
	}
	c, err := net.DialTimeout("unix", "@"+name, 3*time.Second)
	if err != nil {
		return blocked(f.Attack, f.Tried, err)
	}
	_, werr := fmt.Fprintf(c, "hostile %s\n", r.inv)
	c.Close()
	f.Verdict, f.Evidence = Succeeded, fmt.Sprintf("connected (write: %v)", werr)
	return f
}
