package isolation

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"golang.org/x/sys/unix"
)

func init() {
	helpers["gateway-guest"] = helperGatewayGuest
	helpers["gateway-slow"] = func() { time.Sleep(700 * time.Millisecond); helperGatewayGuest() }
	helpers["gateway-sidecar"] = helperGatewaySidecar
}

// gatewayGuest is what a contained guest with a gateway saw of itself: the round trip, its
// descriptors while it held its one connection, its interfaces, and each attempt's errno name
// ("" when it succeeded).
type gatewayGuest struct {
	RoundTrip  string
	FDs        map[int]string
	Interfaces []string
	Attempts   map[string]string
}

// helperGatewayGuest is an engine behind a gateway: it enters and contains itself, talks to the
// gateway (writes "ping", wants "pong"), and while it holds that connection lists its
// descriptors and tries every other way out. It reports on fd 3 and waits to be killed.
func helperGatewayGuest() {
	enter()
	if err := Contain(Policy{}); err != nil {
		fmt.Fprintln(os.Stderr, "Contain:", err)
		os.Exit(ExitRefused)
	}
	port, _ := strconv.Atoi(os.Getenv("STEWARD_TEST_GATEWAY_PORT"))
	g := gatewayGuest{Attempts: map[string]string{}, FDs: map[int]string{}}
	c, err := net.DialTimeout("tcp4", "127.0.0.1:"+strconv.Itoa(port), 5*time.Second)
	if err == nil {
		err = pingPong(c, "ping\n", "pong\n")
	}
	g.RoundTrip = errName(err)
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		g.FDs[fd], _ = os.Readlink("/proc/self/fd/" + e.Name())
	}
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		g.Interfaces = append(g.Interfaces, i.Name)
	}
	for name, f := range guestAttempts(port, os.Getenv("STEWARD_TEST_HOSTADDR")) {
		g.Attempts[name] = errName(f())
	}
	b, _ := json.Marshal(g)
	_, _ = unix.Write(3, append(b, '\n'))
	sleepForever()
}

// guestAttempts are the ways out a guest behind a gateway tries: other ports and addresses,
// TCP bind, UDP, and socket families it must not have.
func guestAttempts(port int, hostAddr string) map[string]func() error {
	host := net.ParseIP(hostAddr).To4()
	return map[string]func() error{
		"connect 127.0.0.1:other": func() error { return dialRaw(unix.AF_INET, unix.SOCK_STREAM, loopback(port+1)) },
		"connect host address":    func() error { return dialRaw(unix.AF_INET, unix.SOCK_STREAM, inet4(host, port)) },
		"connect 127.0.0.2": func() error {
			return dialRaw(unix.AF_INET, unix.SOCK_STREAM, inet4(net.IPv4(127, 0, 0, 2).To4(), port))
		},
		"udp to host address":    func() error { return dialRaw(unix.AF_INET, unix.SOCK_DGRAM, inet4(host, 53)) },
		"bind tcp any port":      func() error { return bindRaw(unix.SOCK_STREAM, 0) },
		"bind tcp gateway port":  func() error { return bindRaw(unix.SOCK_STREAM, port) },
		"socket vsock":           func() error { return socketRaw(unix.AF_VSOCK, unix.SOCK_STREAM) },
		"socket packet":          func() error { return socketRaw(unix.AF_PACKET, unix.SOCK_RAW) },
		"socket alg":             func() error { return socketRaw(unix.AF_ALG, unix.SOCK_SEQPACKET) },
		"socket inet, high bits": func() error { return socketRaw(1<<32|unix.AF_INET, unix.SOCK_STREAM) },
		"socket unix":            func() error { return socketRaw(unix.AF_UNIX, unix.SOCK_STREAM) },
		"socket inet6":           func() error { return socketRaw(unix.AF_INET6, unix.SOCK_STREAM) },
		"socket netlink":         func() error { return socketRaw(unix.AF_NETLINK, unix.SOCK_RAW) },
		"socketpair unix": func() error {
			p, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
			closeAll(p[:])
			return err
		},
		"socketpair vsock": func() error {
			_, err := unix.Socketpair(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
			return err
		},
	}
}

func pingPong(c net.Conn, send, want string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, send); err != nil {
		return err
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("read %q, want %q", got, want)
	}
	return nil
}

func loopback(port int) unix.Sockaddr { return inet4(net.IPv4(127, 0, 0, 1).To4(), port) }

func inet4(ip net.IP, port int) unix.Sockaddr {
	sa := &unix.SockaddrInet4{Port: port}
	copy(sa.Addr[:], ip)
	return sa
}

// socketRaw creates a socket through the raw system call (family as a full register), closes it.
func socketRaw(family uint64, typ int) error {
	fd, _, e := unix.RawSyscall(unix.SYS_SOCKET, uintptr(family), uintptr(typ|unix.SOCK_CLOEXEC), 0)
	if e != 0 {
		return e
	}
	return unix.Close(int(fd))
}

func dialRaw(family, typ int, sa unix.Sockaddr) error {
	fd, err := unix.Socket(family, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if typ == unix.SOCK_DGRAM {
		return unix.Sendto(fd, []byte("x"), 0, sa)
	}
	return unix.Connect(fd, sa)
}

func bindRaw(typ, port int) error {
	fd, err := unix.Socket(unix.AF_INET, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, loopback(port)); err != nil {
		return err
	}
	return unix.Listen(fd, 1)
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd > 0 {
			unix.Close(fd)
		}
	}
}

// errName is "" for nil, the errno's name for a system call's error, else the error's text.
func errName(err error) string {
	var e syscall.Errno
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// hostAddr is an address of this machine outside loopback (the guest must not reach it), or
// "192.0.2.1" (TEST-NET) when it has none.
func hostAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return "192.0.2.1"
}

// gatewayTrip starts helper "gateway-guest" (or h) behind a gateway on port in a domain of s,
// serves its connection (wants "ping", answers "pong") and returns the domain with the guest's
// report. Errors, not t.Fatal: the unprivileged sidecar helper runs it too.
func gatewayTrip(ctx context.Context, s *Supervisor, h string, port uint16) (_ *Domain, _ net.Listener, g gatewayGuest, retErr error) {
	rd, w, err := os.Pipe()
	if err != nil {
		return nil, nil, g, err
	}
	defer rd.Close()
	var stderr strings.Builder
	d, err := s.Start(ctx, Spec{Gateway: port, ExtraFiles: []*os.File{w}, Stderr: &lockedBuilder{b: &stderr},
		Env: workerEnv(h, "STEWARD_TEST_GATEWAY_PORT="+strconv.Itoa(int(port)), "STEWARD_TEST_HOSTADDR="+hostAddr())})
	w.Close()
	if err != nil {
		return nil, nil, g, fmt.Errorf("Start: %w", err)
	}
	defer func() {
		if retErr != nil {
			retErr = fmt.Errorf("%w (guest stderr %q)", retErr, stderr.String())
		}
	}()
	l, err := d.Gateway(ctx)
	if err != nil {
		return d, nil, g, err
	}
	_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	c, err := l.Accept()
	if err != nil {
		return d, l, g, fmt.Errorf("accept: %w", err)
	}
	defer c.Close()
	if err := pingPong(c, "pong\n", "ping\n"); err != nil && !errors.Is(err, io.EOF) {
		return d, l, g, fmt.Errorf("serve: %w", err)
	}
	_ = rd.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(rd).ReadBytes('\n')
	if err != nil {
		return d, l, g, fmt.Errorf("guest report: %w", err)
	}
	return d, l, g, json.Unmarshal(line, &g)
}

// checkGuest lists what the guest's report shows wrong: a failed round trip, a way out, a
// descriptor it should not hold (the listener, the hand-off pair: its only socket is its own
// connection), an interface besides lo.
func checkGuest(g gatewayGuest) []string {
	var bad []string
	if g.RoundTrip != "" {
		bad = append(bad, "round trip: "+g.RoundTrip)
	}
	want := map[string]string{
		"connect 127.0.0.1:other": "EACCES", "connect host address": "ENETUNREACH", "connect 127.0.0.2": "ECONNREFUSED",
		"udp to host address": "ENETUNREACH", "bind tcp any port": "EACCES", "bind tcp gateway port": "EACCES",
		"socket vsock": "EAFNOSUPPORT", "socket packet": "EAFNOSUPPORT", "socket alg": "EAFNOSUPPORT",
		"socket inet, high bits": "EAFNOSUPPORT", "socketpair vsock": "EAFNOSUPPORT",
		"socket unix": "", "socket inet6": "", "socket netlink": "", "socketpair unix": "",
	}
	for name, w := range want {
		if got, ok := g.Attempts[name]; !ok || got != w {
			bad = append(bad, fmt.Sprintf("%s: %q, want %q", name, got, w))
		}
	}
	sockets := 0
	for fd, link := range g.FDs {
		if strings.HasPrefix(link, "socket:") {
			sockets++
		}
		if fd > 3 && !guestOwnFD(link) {
			bad = append(bad, fmt.Sprintf("fd %d: %s", fd, link)) // nothing inherited past the report pipe
		}
	}
	if sockets != 1 {
		bad = append(bad, fmt.Sprintf("%d sockets open, want its one connection: %v", sockets, g.FDs))
	}
	if len(g.Interfaces) != 1 || g.Interfaces[0] != "lo" {
		bad = append(bad, fmt.Sprintf("interfaces %v, want lo alone", g.Interfaces))
	}
	return bad
}

// guestOwnFD: what a Go guest opens itself — its connection, the runtime's poller and cgroup
// CPU limit files, and the /proc/self/fd listing's own descriptor (gone by its readlink: "").
func guestOwnFD(link string) bool {
	for _, p := range []string{"socket:", "anon_inode:", "/sys/fs/cgroup/"} {
		if strings.HasPrefix(link, p) {
			return true
		}
	}
	return link == ""
}

// socketInode is "socket:[<inode>]" of l, as /proc/<pid>/fd shows it.
func socketInode(t *testing.T, l net.Listener) string {
	t.Helper()
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	_ = rc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) })
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("socket:[%d]", st.Ino)
}

// TestGatewayListenerInDomain: a contained domain started with Spec.Gateway hands the
// supervisor a listener in its own network namespace (in every real mode, forked here and by
// the launcher): the supervisor accepts the guest's connection to 127.0.0.1:<port> and bytes go
// both ways; the host's own listener on the same port is a different socket; the guest sees lo
// alone, can connect nowhere else, bind no TCP port, create no AF_VSOCK/AF_PACKET/AF_ALG
// socket, and holds neither the listener nor the hand-off pair; Close closes the listener.
func TestGatewayListenerInDomain(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	for _, mode := range realModes(t) {
		bothWays(t, string(mode), func(t *testing.T, here bool) {
			s := newContained(t, mode, here)
			hostL := listen(t) // the host's own listener on the port the domain listens on too
			port := uint16(hostL.Addr().(*net.TCPAddr).Port)
			d, l, g, err := gatewayTrip(context.Background(), s, "gateway-guest", port)
			if d != nil {
				t.Cleanup(func() { d.Close() })
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range checkGuest(g) {
				t.Error(b)
			}
			ino := socketInode(t, l)
			ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.Pid()))
			for _, e := range ents {
				if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", d.Pid(), e.Name())); link == ino {
					t.Errorf("the domain holds the listener (%s) as fd %s", ino, e.Name())
				}
			}
			if again, err := d.Gateway(context.Background()); again != l || err != nil {
				t.Errorf("second Gateway: %v, %v; want the same listener", again, err)
			}
			o, err := d.Kill(context.Background())
			assertReaped(t, o, err, "kill")
			if err := d.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
			}
		})
	}
}

// TestGatewaySpec: Spec.Gateway needs a domain without network, and contained domains.
func TestGatewaySpec(t *testing.T) {
	needCgroups(t)
	s := newSupervisor(t, ModeAuto, nil) // uncontained
	if _, err := s.Start(context.Background(), Spec{Gateway: 8080, Network: true, Env: workerEnv("noop")}); !errors.Is(err, ErrInvalidSpec) {
		t.Errorf("Gateway with Network: %v, want ErrInvalidSpec", err)
	}
	if _, err := s.Start(context.Background(), Spec{Gateway: 8080, Env: workerEnv("noop")}); !errors.Is(err, ErrContainment) {
		t.Errorf("Gateway uncontained: %v, want ErrContainment", err)
	}
	d, err := s.Start(context.Background(), Spec{Env: workerEnv("noop")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.Gateway(context.Background()); !errors.Is(err, ErrGateway) {
		t.Errorf("Gateway of a domain without: %v, want ErrGateway", err)
	}
}

// TestGatewayHandOff: a wait shorter than the hand-off returns the context's error and may be
// retried; Close ends a wait; a domain that ends without handing its listener over (its program, sleep, never calls
// EnterWorker) gives an *Error wrapping ErrGateway, for good.
func TestGatewayHandOff(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	s := newContained(t, ModeAuto, false)
	t.Run("slow", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		d, err := s.Start(context.Background(), Spec{Gateway: 9000, Env: workerEnv("gateway-slow", "STEWARD_TEST_GATEWAY_PORT=9000")})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if _, err := d.Gateway(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("short wait: %v, want DeadlineExceeded", err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if _, err := d.Gateway(ctx); err != nil {
			t.Fatalf("retried wait: %v", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		d, err := s.Start(context.Background(), Spec{Gateway: 9000, Env: workerEnv("gateway-slow", "STEWARD_TEST_GATEWAY_PORT=9000")})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := d.Gateway(context.Background())
			got <- err
		}()
		time.Sleep(50 * time.Millisecond)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrGateway) {
				t.Errorf("Gateway during Close: %v, want ErrClosed or ErrGateway", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Gateway still waits after Close")
		}
	})
	t.Run("never", func(t *testing.T) {
		d, err := s.Start(context.Background(), Spec{Gateway: 9000, Path: "/bin/sleep", Args: []string{"0.3"}})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = d.Gateway(ctx)
		var e *Error
		if !errors.Is(err, ErrGateway) || !errors.As(err, &e) {
			t.Fatalf("Gateway: %v, want an *Error wrapping ErrGateway", err)
		}
		if _, again := d.Gateway(ctx); again != err {
			t.Errorf("second Gateway: %v, want the same error", again)
		}
	})
}

// unprivilegedResult is what helper gateway-sidecar reports on stdout.
type unprivilegedResult struct {
	Err    string
	UID    int // the sidecar's own
	Bad    []string
	Guest  string
	Mode   Mode
	Parent string
	Forked string // "launcher" or "here"
}

// helperGatewaySidecar plays an unprivileged sidecar (the test runs it as uid 65534 in a
// delegated subtree): New under ParentAuto with containment required, one gateway round trip
// (forked here or by the launcher, STEWARD_TEST_FORK_HERE), its findings on stdout, teardown.
func helperGatewaySidecar() {
	res := unprivilegedResult{UID: os.Geteuid()}
	defer func() {
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
	}()
	s, err := New(Config{Parent: ParentAuto, Containment: ContainRequire, ForkHere: os.Getenv("STEWARD_TEST_FORK_HERE") == "1"})
	if err != nil {
		res.Err = err.Error()
		return
	}
	defer s.Close(context.Background())
	res.Guest, res.Mode, res.Parent, res.Forked = s.Report().Containment.Guest, s.Mode(), s.Report().Parent.Source, "here"
	if s.fork != nil {
		res.Forked = "launcher"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, _, g, err := gatewayTrip(ctx, s, "gateway-guest", 8080)
	if d != nil {
		defer d.Close()
	}
	if err != nil {
		res.Err = err.Error()
		return
	}
	res.Bad = checkGuest(g)
}

// delegateSubtree makes parent in every mounted hierarchy and hands it to uid, as a service
// manager delegates a subtree; removed (with what the sidecar left in it) at cleanup.
func delegateSubtree(t *testing.T, parent string, uid int) []string {
	t.Helper()
	var dirs []string
	for _, root := range hierarchyRoots() {
		dir := filepath.Join(root, parent)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
		for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control", "tasks"} {
			if err := os.Chown(filepath.Join(dir, f), uid, uid); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, dir := range dirs {
			_ = os.Remove(filepath.Join(dir, LeafName))
			if err := os.Remove(dir); err != nil {
				t.Errorf("delegated cgroup left: %v", err)
			}
		}
	})
	return dirs
}

// publicCopy copies the test binary into a world-readable directory, for another uid to run.
func publicCopy(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := guestReachable(t)
	path := filepath.Join(dir, "isolation.test")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestGatewayUnprivilegedDelegated: a supervisor running as uid 65534 in a delegated subtree
// (cgroup parent auto), forking through its launcher and itself, gets its gateway listener and
// serves the guest through it as root does, with every way out shut the same.
func TestGatewayUnprivilegedDelegated(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Unavailable(t, "running a supervisor as another uid needs setpriv (util-linux)")
	}
	bin := publicCopy(t)
	bothWays(t, "", func(t *testing.T, here bool) {
		dirs := delegateSubtree(t, fmt.Sprintf("steward-test-gw-%d-%v", os.Getpid(), here), DefaultGuestID)
		var sh strings.Builder
		for _, d := range dirs {
			fmt.Fprintf(&sh, "echo $$ > '%s/cgroup.procs'\n", d)
		}
		fmt.Fprintf(&sh, "exec %s --reuid=%d --regid=%d --clear-groups --pdeathsig KILL -- '%s'\n", setpriv, DefaultGuestID, DefaultGuestID, bin)
		cmd := exec.Command("/bin/sh", "-ec", sh.String())
		forkHere := "0"
		if here {
			forkHere = "1"
		}
		cmd.Env = []string{helperEnv + "=gateway-sidecar", runEnv + "=" + strconv.Itoa(os.Getpid()), "STEWARD_TEST_FORK_HERE=" + forkHere, "PATH=/usr/bin:/bin"}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("unprivileged sidecar: %v (stderr %q)", err, stderr.String())
		}
		var res unprivilegedResult
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("unprivileged sidecar said %q: %v (stderr %q)", out, err, stderr.String())
		}
		t.Logf("unprivileged sidecar: %+v", res)
		want := "launcher"
		if here || res.Mode == ModeV2 {
			want = "here"
		}
		if res.Err != "" || res.UID != DefaultGuestID || len(res.Bad) > 0 || res.Guest != "65534:65534" || res.Parent != "delegated" || res.Forked != want {
			t.Fatalf("unprivileged sidecar: %+v, want uid 65534, no error, nothing wrong, guest 65534:65534 on a delegated parent, forked by %s (stderr %q)", res, want, stderr.String())
		}
	})
}
