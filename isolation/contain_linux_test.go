package isolation

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/storage"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

func init() {
	helpers["contained"] = helperContained
	helpers["killself"] = func() {
		enter()
		if os.Getenv("STEWARD_TEST_CONTAIN") == "1" {
			if err := Contain(Policy{}); err != nil {
				fmt.Fprintln(os.Stderr, "Contain:", err)
				os.Exit(ExitRefused)
			}
		}
		done := make(chan struct{})
		go func() { // from a goroutine: not necessarily the thread whose tid is the pid
			runtime.LockOSThread()
			KillSelf()
			close(done)
		}()
		<-done
	}
}

// TestKillSelfInItsOwnPIDNamespace: a contained worker is init of its PID namespace, where the
// kernel drops its own kill(2); KillSelf still ends it by SIGKILL, before and after Contain.
func TestKillSelfInItsOwnPIDNamespace(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t) // the tests expect the default guest 65534, which only root may map
	bothWays(t, "", func(t *testing.T, here bool) {
		s := newContained(t, ModeAuto, here)
		for _, contain := range []string{"0", "1"} {
			var stderr strings.Builder
			d, err := s.Start(context.Background(), Spec{Env: workerEnv("killself", "STEWARD_TEST_CONTAIN="+contain), Stderr: &lockedBuilder{b: &stderr}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			o, err := d.Wait(ctx)
			cancel()
			if err != nil || o.SignalName != "SIGKILL" {
				_, _ = d.Kill(context.Background())
				t.Errorf("contain=%s: outcome %+v, %v (stderr %q)", contain, o, err, stderr.String())
			}
			_ = d.Close()
		}
	})
}

// probeResult is what the contained helper observed of itself, attempt by attempt: each
// attempt's error text ("" when it succeeded).
type probeResult struct {
	Pid, Ppid, UID, GID int
	Tmp                 string
	PidsVisible         int
	Leader              bool // Contain ran, and main goes on, on the process's first thread
	Attempts            map[string]string
}

// helperContained enters, contains itself with the policy the test gives (one writable dir,
// one TCP port), and then tries what a contained worker must and must not be able to do.
func helperContained() {
	enter()
	write := os.Getenv("STEWARD_TEST_WRITE")
	port, _ := strconv.Atoi(os.Getenv("STEWARD_TEST_PORT"))
	if err := Contain(Policy{}); err != nil { // the policy came with the Spec (startContained)
		fmt.Fprintln(os.Stderr, "Contain:", err)
		os.Exit(ExitRefused)
	}
	res := probeResult{Pid: os.Getpid(), Ppid: os.Getppid(), UID: os.Getuid(), GID: os.Getgid(), Tmp: os.Getenv("TMPDIR"),
		Leader: unix.Gettid() == unix.Getpid(), Attempts: map[string]string{}}
	try := func(name string, err error) {
		res.Attempts[name] = ""
		if err != nil {
			res.Attempts[name] = err.Error()
		}
	}
	try("write tmp", os.WriteFile(filepath.Join(os.Getenv("TMPDIR"), "t"), []byte("x"), 0o600))
	try("write host /tmp", os.WriteFile("/tmp/steward-contained-test", []byte("x"), 0o600))
	try("write allowed dir", os.WriteFile(filepath.Join(write, "allowed"), []byte("x"), 0o600))
	try("write sibling dir", os.WriteFile(filepath.Join(filepath.Dir(write), "sibling", "x"), []byte("x"), 0o600))
	try("write /etc", os.WriteFile("/etc/steward-contained-test", []byte("x"), 0o600))
	try("stage large object", stageLarge(write))
	_, err := os.ReadFile(os.Getenv("STEWARD_TEST_SECRET"))
	try("read secret", err)
	try("mount tmpfs", unix.Mount("none", "/mnt", "tmpfs", 0, ""))
	try("unshare user", unix.Unshare(unix.CLONE_NEWUSER))
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SEIZE, 1, 0, 0, 0, 0)
	try("ptrace", errnoErr(e))
	_, _, e = unix.Syscall(unix.SYS_BPF, 0, 0, 0)
	try("bpf", errnoErr(e))
	try("setrlimit raise nofile", unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}))
	try("chown to another uid", os.Chown(filepath.Join(write, "allowed"), 1, 1)) // unmapped in its namespace
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 2*time.Second)
	if c != nil {
		c.Close()
	}
	try("connect allowed port", err)
	c, err = net.DialTimeout("tcp", os.Getenv("STEWARD_TEST_OTHER"), 2*time.Second)
	if c != nil {
		c.Close()
	}
	try("connect other port", err)
	sup, _ := strconv.Atoi(os.Getenv(runEnv)) // the supervisor's pid on the host
	try("signal supervisor", syscall.Kill(sup, syscall.SIGSTOP))
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			res.PidsVisible++
		}
	}
	b, _ := json.Marshal(res)
	_, _ = unix.Write(3, append(b, '\n'))
	sleepForever()
}

// largeKey is the object stageLarge puts in the writable dir: large enough for a local store
// to stage it with direct I/O past its first 8 MiB (storage.directStage).
const largeKey = "large/object"

// largeBody is largeKey's content.
func largeBody() []byte {
	b := make([]byte, 20<<20+777)
	for i := range b {
		b[i] = byte(i*131 + i>>16)
	}
	return b
}

// stageLarge puts largeBody in a local store rooted at root, as a contained worker building an
// index writes its segment.
func stageLarge(root string) error {
	st, err := storage.NewLocalStore(root)
	if err != nil {
		return err
	}
	body := largeBody()
	return st.Put(context.Background(), largeKey, bytes.NewReader(body), int64(len(body)))
}

func errnoErr(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// TestContainedWorker launches a real contained domain as root and checks, from the host's side
// and from the worker's own attempts, every layer: the guest identity, the namespaces, the
// read-only mounts with one writable dataset dir and a private /tmp, Landlock, seccomp, no
// capability, no_new_privs from birth.
func TestContainedWorker(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t) // the tests expect the default guest 65534, which only root may map
	for _, mode := range realModes(t) {
		bothWays(t, string(mode), func(t *testing.T, here bool) {
			s := newContained(t, mode, here)
			rep := s.Report().Containment
			if missing := rep.Missing(); len(missing) > 0 || rep.Guest != "65534:65534" {
				t.Fatalf("containment %+v, missing %v", rep, missing)
			}
			base := guestReachable(t)
			write := filepath.Join(base, "dataset")
			for _, d := range []string{write, filepath.Join(base, "sibling"), filepath.Join(base, "tmp")} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chown(write, DefaultGuestID, DefaultGuestID); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(filepath.Join(base, "sibling"), DefaultGuestID, DefaultGuestID); err != nil {
				t.Fatal(err) // writable by the guest's uid: only Landlock and the mounts stop it
			}
			secret := filepath.Join(base, "secret")
			if err := os.WriteFile(secret, []byte("s3cr3t"), 0o644); err != nil {
				t.Fatal(err)
			}
			allowed, other := listen(t), listen(t)
			_, port, _ := net.SplitHostPort(allowed.Addr().String())
			d, r := startContained(t, s, Spec{TempDir: filepath.Join(base, "tmp"), Network: true,
				Env: []string{"STEWARD_TEST_WRITE=" + write, "STEWARD_TEST_PORT=" + port,
					"STEWARD_TEST_OTHER=" + other.Addr().String(), "STEWARD_TEST_SECRET=" + secret}})
			res := r()
			want := map[string]bool{ // attempt → must succeed
				"write tmp": true, "write allowed dir": true, "connect allowed port": true, "stage large object": true,
				"write sibling dir": false, "write /etc": false, "write host /tmp": false, "read secret": false, "mount tmpfs": false,
				"unshare user": false, "ptrace": false, "bpf": false, "setrlimit raise nofile": false,
				"chown to another uid": false, "connect other port": false, "signal supervisor": false,
			}
			for name, ok := range want {
				got, tried := res.Attempts[name]
				if !tried || (got == "") != ok {
					t.Errorf("%s: error %q, want success=%v", name, got, ok)
				}
			}
			if res.Pid != 1 || res.Ppid != 0 || res.UID != 0 || res.PidsVisible != 1 || res.Tmp != filepath.Join(base, "tmp") || !res.Leader {
				t.Errorf("inside: %+v", res)
			}
			// TMPDIR is the domain's own tmpfs: what the guest wrote there is in its mount
			// namespace (seen through /proc/<pid>/root), not in the host's directory.
			if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s/t", d.Pid(), filepath.Join(base, "tmp"))); err != nil {
				t.Errorf("TMPDIR is not the domain's temp dir: %v", err)
			}
			if _, err := os.Stat(filepath.Join(base, "tmp", "t")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the guest's temp file is in the host's directory: %v", err)
			}
			checkStagedDirect(t, filepath.Join(write, largeKey))
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(write, "allowed"), &st); err != nil || st.Uid != DefaultGuestID {
				t.Errorf("file written by the guest: uid %d, %v", st.Uid, err)
			}
			status := procStatus(t, d.Pid())
			for k, v := range map[string]string{"Uid": "65534\t65534\t65534\t65534", "CapEff": "0000000000000000",
				"CapPrm": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
				if status[k] != v {
					t.Errorf("host /proc/%d/status %s = %q, want %q", d.Pid(), k, status[k], v)
				}
			}
			for _, ns := range []string{"user", "pid", "mnt", "ipc", "uts", "cgroup"} {
				mine, _ := os.Readlink("/proc/self/ns/" + ns)
				threads := threadNamespaces(t, d.Pid(), ns)
				leader := threads[d.Pid()]
				if leader == "" || leader == mine {
					t.Errorf("namespace %s shared with the supervisor (%q)", ns, leader)
				}
				for tid, theirs := range threads {
					if theirs != leader {
						t.Errorf("thread %d of the worker is in namespace %s, its leader in %s (the supervisor's: %s)", tid, theirs, leader, mine)
					}
				}
				if len(threads) < 2 {
					t.Errorf("namespace %s: %d threads seen, a Go worker has several", ns, len(threads))
				}
			}
			if d.WorkerPid() != 1 {
				t.Errorf("WorkerPid %d", d.WorkerPid())
			}
			o, err := d.Kill(context.Background())
			assertReaped(t, o, err, "kill")
		})
	}
}

// TestContainedWithoutNetwork: a domain without network has its own network namespace with
// nothing in it, so even loopback listeners of the host are out of reach.
func TestContainedWithoutNetwork(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t) // the tests expect the default guest 65534, which only root may map
	bothWays(t, "", func(t *testing.T, here bool) {
		s := newContained(t, ModeAuto, here)
		l := listen(t)
		_, port, _ := net.SplitHostPort(l.Addr().String())
		base := guestReachable(t)
		d, r := startContained(t, s, Spec{Env: []string{"STEWARD_TEST_WRITE=" + base, "STEWARD_TEST_PORT=" + port,
			"STEWARD_TEST_OTHER=" + l.Addr().String(), "STEWARD_TEST_SECRET=/nonexistent"}})
		res := r()
		if got := res.Attempts["connect allowed port"]; got == "" {
			t.Fatalf("connected to the host's loopback from a domain without network")
		}
		mine, _ := os.Readlink("/proc/self/ns/net")
		theirs, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", d.Pid()))
		if mine == theirs {
			t.Fatalf("network namespace shared: %s", theirs)
		}
		o, err := d.Kill(context.Background())
		assertReaped(t, o, err, "kill")
	})
}

func startContained(t *testing.T, s *Supervisor, spec Spec) (*Domain, func() probeResult) {
	t.Helper()
	// helperContained's one writable dir and one TCP port, in the Spec: a path named to Contain
	// alone would lie under a tree the domain's mount namespace hides.
	for _, kv := range spec.Env {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "STEWARD_TEST_WRITE":
			spec.Policy.Write = append(spec.Policy.Write, v)
		case "STEWARD_TEST_PORT":
			port, _ := strconv.Atoi(v)
			spec.Policy.Connect = append(spec.Policy.Connect, uint16(port))
		}
	}
	d, report := startJSONHelper(t, s, "contained", spec, 20*time.Second)
	return d, func() probeResult {
		var res probeResult
		report(&res)
		return res
	}
}

// startJSONHelper starts helper h in a domain of s with spec (fd 3 its report pipe, its stderr
// kept for the failure message) and returns the domain and a function that waits up to wait
// for the helper's one-line JSON report and decodes it into out.
func startJSONHelper(t *testing.T, s *Supervisor, h string, spec Spec, wait time.Duration) (*Domain, func(out any)) {
	t.Helper()
	rd, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	spec.Env = workerEnv(h, spec.Env...)
	spec.ExtraFiles = []*os.File{w}
	var stderr strings.Builder
	spec.Stderr = &lockedBuilder{b: &stderr}
	d, err := s.Start(context.Background(), spec)
	w.Close()
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, func(out any) {
		t.Helper()
		_ = rd.SetReadDeadline(time.Now().Add(wait))
		line, err := bufio.NewReader(rd).ReadBytes('\n')
		if err != nil {
			o, _ := d.Kill(context.Background())
			t.Fatalf("no report (%v): outcome %+v, stderr %q", err, o, spec.Stderr.(*lockedBuilder).String())
		}
		if err := json.Unmarshal(line, out); err != nil {
			t.Fatalf("report %q: %v", line, err)
		}
	}
}

// guestReachable is a t.TempDir() the guest can walk into (t.TempDir and its parent are 0700).
func guestReachable(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{d, filepath.Dir(d)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if c != nil {
				c.Close()
			}
		}
	}()
	return l
}

// threadNamespaces names the namespace of kind ns each thread of pid is in, by thread id.
func threadNamespaces(t *testing.T, pid int, ns string) map[int]string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link, err := os.Readlink(filepath.Join(dir, e.Name(), "ns", ns))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended in between
		}
		if err != nil {
			t.Fatalf("thread %d: %v", tid, err)
		}
		got[tid] = link
	}
	return got
}

func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// lockedBuilder is a strings.Builder safe for the domain's stderr copier and the test.
type lockedBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestCloseHoldingKeepsNamespaces: a contained domain's IPC, mount and network namespaces
// outlive CloseHolding, held by descriptors of the supervisor only, until release; Close releases
// them at once; a domain with the host's network holds its IPC and mount namespaces alone.
func TestCloseHoldingKeepsNamespaces(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t) // the tests expect the default guest 65534, which only root may map
	bothWays(t, "", func(t *testing.T, here bool) {
		s := newContained(t, ModeAuto, here)
		base := guestReachable(t)
		start := func(network bool) (*Domain, map[string]string) {
			d, r := startContained(t, s, Spec{Network: network, Env: []string{"STEWARD_TEST_WRITE=" + base,
				"STEWARD_TEST_PORT=1", "STEWARD_TEST_OTHER=127.0.0.1:1", "STEWARD_TEST_SECRET=/nonexistent"}})
			r() // the worker is alive and reported: its namespaces are there to name
			ns := map[string]string{}
			for _, kind := range []string{"ipc", "mnt", "net"} {
				link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", d.Pid(), kind))
				if err != nil {
					t.Fatal(err)
				}
				if mine, _ := os.Readlink("/proc/self/ns/" + kind); link == mine {
					link = "" // shared with the supervisor: not the domain's to hold
				}
				ns[kind] = link
			}
			o, err := d.Kill(context.Background())
			assertReaped(t, o, err, "kill")
			return d, ns
		}
		held := func(ns map[string]string) (got []string) {
			fds := openLinks(t)
			for _, kind := range []string{"ipc", "mnt", "net"} {
				if ns[kind] != "" && fds[ns[kind]] {
					got = append(got, kind)
				}
			}
			return got
		}

		d, ns := start(false)
		if ns["ipc"] == "" || ns["mnt"] == "" || ns["net"] == "" {
			t.Fatalf("contained worker without network shares a namespace with the supervisor: %v", ns)
		}
		release, err := d.CloseHolding()
		if err != nil {
			t.Fatal(err)
		}
		if got := held(ns); !slices.Equal(got, []string{"ipc", "mnt", "net"}) {
			t.Fatalf("after CloseHolding the supervisor holds %v of the dead domain's namespaces %v, want ipc, mnt and net", got, ns)
		}
		release()
		release() // idempotent
		if got := held(ns); len(got) != 0 {
			t.Fatalf("after release the supervisor still holds %v", got)
		}

		d, ns = start(false)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if got := held(ns); len(got) != 0 {
			t.Fatalf("after Close the supervisor still holds %v", got)
		}

		d, ns = start(true)
		if ns["net"] != "" {
			t.Fatalf("a domain with network has a network namespace of its own: %v", ns)
		}
		release, err = d.CloseHolding()
		if err != nil {
			t.Fatal(err)
		}
		if got := held(ns); !slices.Equal(got, []string{"ipc", "mnt"}) {
			t.Fatalf("a domain with the host's network: held %v, want ipc and mnt", got)
		}
		release()
		if got := held(ns); len(got) != 0 {
			t.Fatalf("after release the supervisor still holds %v", got)
		}
	})
}

// openLinks is the set of what this process's descriptors link to ("net:[4026532187]", …).
func openLinks(t *testing.T) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]bool{}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil {
			links[l] = true
		}
	}
	return links
}

// bothWays runs f as subtests forking contained workers through the launcher ("launcher") and
// from the supervisor itself ("here"): the containment contract is the same either way.
func bothWays(t *testing.T, name string, f func(t *testing.T, here bool)) {
	for _, here := range []bool{false, true} {
		way := "launcher"
		if here {
			way = "here"
		}
		if name != "" {
			way = name + "/" + way
		}
		t.Run(way, func(t *testing.T) { f(t, here) })
	}
}

// newContained is a contained supervisor forking its workers here or through its launcher;
// at the end of the test it checks that every contained worker was forked the way asked (the
// launcher is used where the mode has a unified hierarchy).
func newContained(t *testing.T, mode Mode, here bool) *Supervisor {
	t.Helper()
	s := newSupervisor(t, mode, func(c *Config) { c.Containment = ContainRequire; c.ForkHere = here })
	viaLauncher := !here && s.Mode() != ModeV2
	if viaLauncher != (s.fork != nil) {
		t.Fatalf("mode %s, ForkHere %v: launcher %v (%s)", s.Mode(), here, s.fork != nil, launcherCheck(s))
	}
	t.Cleanup(func() {
		if viaLauncher && (s.fork.forked.Load() == 0 || !s.fork.usable()) {
			t.Errorf("the launcher forked %d workers and is usable: %v", s.fork.forked.Load(), s.fork.usable())
		}
	})
	return s
}

func launcherCheck(s *Supervisor) string {
	for _, c := range s.Report().Checks {
		if c.Name == "containment launcher" {
			return c.Detail
		}
	}
	return "no launcher check"
}

// checkStagedDirect: the object a contained worker staged (stageLarge) went to the disk past its
// first 8 MiB without the page cache — direct I/O works under the containment layers (user
// namespace, Landlock, seccomp), it did not fall back — and its bytes are largeBody's.
func checkStagedDirect(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Errorf("staged object: %v", err)
		return
	}
	defer f.Close()
	want := largeBody()
	const firstWindow = 8 << 20
	var cs unix.Cachestat_t
	span := int64(len(want))&^4095 - firstWindow
	switch err := unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{Off: firstWindow, Len: uint64(span)}, &cs, 0); {
	case errors.Is(err, unix.ENOSYS):
		testenv.Unavailable(t, "cachestat(2) (Linux 6.5) is not available: the page cache state cannot be read")
	case err != nil:
		t.Errorf("cachestat: %v", err)
	case cs.Cache != 0:
		t.Errorf("%d pages of the staged object past its first window are in the page cache: not written direct", cs.Cache)
	}
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("staged object: %d bytes read (equal %v), %v", len(got), bytes.Equal(got, want), err)
	}
}

// TestLandlockABIVerifiedOrRejected: the Landlock layer is enforced only from ABI 4 (filesystem
// and TCP rules); below it (Linux 6.1 offers ABI 2: the v2 VM) --require-containment refuses to
// start, for landlock alone, and auto containment starts, reporting the layer not enforced with the
// ABI it found. On ABI ≥ 4 both verify with every layer. Run on the host and in the v2 VM, it
// covers both branches.
func TestLandlockABIVerifiedOrRejected(t *testing.T) {
	needCgroups(t)
	abi, err := ll.LandlockGetABIVersion()
	if err != nil {
		abi = 0
	}
	t.Logf("Landlock ABI %d (%v)", abi, err)
	mode := realModes(t)[0]
	req, rerr := New(Config{Parent: testParent, Mode: mode, Containment: ContainRequire})
	if rerr == nil {
		t.Cleanup(func() {
			if err := req.Close(context.Background()); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	var land Layer
	s := newSupervisor(t, mode, func(c *Config) { c.Containment = ContainAuto })
	for _, l := range s.Report().Containment.Layers {
		if l.Name == "landlock" {
			land = l
		}
	}
	t.Logf("require: %v; auto: landlock enforced %v: %s", rerr, land.Enforced, land.Detail)
	if abi >= 4 {
		if rerr != nil || !land.Enforced || len(s.Report().Containment.Missing()) > 0 {
			t.Fatalf("ABI %d: require %v, auto's layers %+v: want both verified", abi, rerr, s.Report().Containment.Layers)
		}
		return
	}
	if missing := ReportOf(rerr).Containment.Missing(); !errors.Is(rerr, ErrIsolationUnavailable) || !slices.Equal(missing, []string{"landlock"}) {
		t.Fatalf("ABI %d: New(require) = %v, missing %v: want refused for landlock alone", abi, rerr, missing)
	}
	if land.Enforced || !strings.Contains(land.Detail, fmt.Sprintf("offers %d", abi)) || !s.Report().Verified {
		t.Fatalf("ABI %d: auto verified %v with landlock %+v: want verified, the layer not enforced, its ABI stated", abi, s.Report().Verified, land)
	}
}
