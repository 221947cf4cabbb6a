// Package testetcd runs a real 3-member etcd cluster on 127.0.0.1 for tests: free ports, temp
// data dirs, fast raft timings, and members that a test may stop, kill and start again (fault
// injection). The binary is built once by scripts/etcd.sh into .tools/ (or $STEWARD_TOOLS); this
// package never builds etcd and never fakes it.
package testetcd

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/lockedproc"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
)

// ErrExited means a member exited before it became healthy.
var ErrExited = errors.New("etcd member exited")

// readyTimeout bounds a cluster start, or one member's restart, until /health answers.
const readyTimeout = 30 * time.Second

// Cluster is a running (or partly stopped) 3-member etcd cluster.
type Cluster struct {
	// Endpoints are the members' client URLs (http://127.0.0.1:PORT), for clientv3.Config.
	Endpoints []string
	// Members are the members, in Endpoints order.
	Members []*Member
}

// Member is one etcd server process with a fixed name, ports and data dir.
type Member struct {
	Name      string
	ClientURL string
	PeerURL   string
	Dir       string

	bin, initialCluster, token string
	mu                         sync.Mutex
	cmd                        *exec.Cmd
	done                       chan struct{} // closed once cmd is reaped
	exited                     chan error
}

// Binary returns the path of the cached etcd binary, or an error telling how to install it.
func Binary() (string, error) { return testbin.Tool("etcd", "scripts/etcd.sh install") }

var (
	sharedOnce sync.Once
	shared     *Cluster
	sharedDir  string
	sharedErr  error
)

// Shared returns the test binary's shared 3-member cluster, started lazily (tests keep apart by
// key prefix: see Prefix). A missing binary skips t (fails it under STEWARD_REQUIRE_REAL=1). Call
// Cleanup from TestMain after m.Run.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	sharedOnce.Do(func() {
		if sharedDir, sharedErr = os.MkdirTemp("", "steward-etcd-"); sharedErr == nil {
			shared, sharedErr = New(sharedDir, 3)
		}
	})
	if sharedErr != nil {
		testenv.Unavailable(t, "etcd unavailable: "+sharedErr.Error())
	}
	return shared
}

// Cleanup stops the shared cluster, if one was started, and removes its data.
func Cleanup() {
	if shared != nil {
		shared.Stop()
	}
	if sharedDir != "" {
		os.RemoveAll(sharedDir)
	}
}

// Prefix returns a key prefix of its own for t on a shared cluster.
func Prefix(t testing.TB) string {
	return "/steward-test/" + testbin.RandID(strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())+"-")
}

// Start starts a 3-member cluster for t in t.TempDir(), stopped when t ends. A missing binary
// skips t (fails it under STEWARD_REQUIRE_REAL=1).
func Start(t testing.TB) *Cluster {
	t.Helper()
	c, err := New(t.TempDir(), 3)
	if err != nil {
		testenv.Unavailable(t, "etcd unavailable: "+err.Error())
	}
	t.Cleanup(c.Stop)
	return c
}

// New starts an n-member cluster under dir and returns once every member is healthy. A free port
// can be taken by another process between choosing it and etcd binding it: a start whose member
// exits is retried on new ports and a new data dir, three times.
func New(dir string, n int) (*Cluster, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	return NewFrom(bin, dir, n)
}

// NewFrom is New with the etcd binary bin (a campaign's --etcd-bin) instead of the cached one.
func NewFrom(bin, dir string, n int) (*Cluster, error) {
	for attempt := 1; ; attempt++ {
		c, err := start(bin, filepath.Join(dir, fmt.Sprint(attempt)), n)
		if err == nil || !errors.Is(err, ErrExited) || attempt == 3 {
			return c, err
		}
	}
}

func start(bin, dir string, n int) (*Cluster, error) {
	c := &Cluster{}
	token := testbin.RandID("steward-etcd-")
	var peers []string
	for i := range n {
		cport, err := freePort()
		if err != nil {
			return nil, err
		}
		pport, err := freePort()
		if err != nil {
			return nil, err
		}
		m := &Member{
			Name:      fmt.Sprintf("m%d", i),
			ClientURL: fmt.Sprintf("http://127.0.0.1:%d", cport),
			PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", pport),
			Dir:       filepath.Join(dir, fmt.Sprintf("m%d", i)),
			bin:       bin, token: token,
		}
		peers = append(peers, m.Name+"="+m.PeerURL)
		c.Members = append(c.Members, m)
		c.Endpoints = append(c.Endpoints, m.ClientURL)
	}
	for _, m := range c.Members {
		m.initialCluster = strings.Join(peers, ",")
		if err := m.launch(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for _, m := range c.Members {
		if err := m.waitHealthy(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// Stop kills every member and waits for them to exit. The data dirs are kept.
func (c *Cluster) Stop() {
	for _, m := range c.Members {
		m.Kill()
	}
}

// Start (re)starts a stopped or killed member on its data dir and ports, and returns once it is
// healthy (which needs a quorum). Starting a running member does nothing.
func (m *Member) Start() error {
	if m.Running() {
		return nil
	}
	if err := m.launch(); err != nil {
		return err
	}
	return m.waitHealthy()
}

// Running reports whether the member's process is running.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// Stop stops the member with SIGTERM (SIGKILL after 10 s) and waits for it to exit.
func (m *Member) Stop() { m.signal(syscall.SIGTERM, 10*time.Second) }

// Kill kills the member with SIGKILL and waits for it to exit.
func (m *Member) Kill() { m.signal(syscall.SIGKILL, 0) }

func (m *Member) signal(sig syscall.Signal, grace time.Duration) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if grace > 0 {
		select {
		case <-done:
			return
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-done
}

func (m *Member) launch() error {
	if err := os.MkdirAll(m.Dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(m.Dir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Fast raft timings, with room for a loaded 2-core machine: a killed leader is replaced
	// within about two seconds. The initial-* flags are
	// ignored by a member restarted on its existing data dir.
	cmd := exec.Command(m.bin,
		"--name", m.Name, "--data-dir", filepath.Join(m.Dir, "data"),
		"--listen-client-urls", m.ClientURL, "--advertise-client-urls", m.ClientURL,
		"--listen-peer-urls", m.PeerURL, "--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster", m.initialCluster, "--initial-cluster-state", "new",
		"--initial-cluster-token", m.token,
		"--heartbeat-interval", "100", "--election-timeout", "1000",
		"--log-level", "warn", "--quota-backend-bytes", fmt.Sprint(512<<20))
	cmd.Env = []string{"HOME=" + m.Dir, "PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = memberAttr()
	exited, done := make(chan error, 1), make(chan struct{})
	if err := lockedproc.Start(cmd, exited, done); err != nil {
		return fmt.Errorf("start etcd %s: %w", m.Name, err)
	}
	m.mu.Lock()
	m.cmd, m.done, m.exited = cmd, done, exited
	m.mu.Unlock()
	return nil
}

// waitHealthy polls the member's /health until it reports a cluster with a leader.
func (m *Member) waitHealthy() error {
	m.mu.Lock()
	exited := m.exited
	m.mu.Unlock()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(m.Dir, "etcd.log"))
			return fmt.Errorf("%w: %s (%v): %s", ErrExited, m.Name, err, tail(log, 2000))
		default:
		}
		if resp, err := client.Get(m.ClientURL + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("etcd %s not healthy after %s", m.Name, readyTimeout)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
