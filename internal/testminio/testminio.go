// Package testminio runs a real MinIO server on 127.0.0.1 for tests. The binary is built once by
// scripts/minio.sh into .tools/ (or $STEWARD_TOOLS); this package never builds or imports MinIO.
//
// Shared returns one server per test binary, started lazily; call Cleanup from TestMain after
// m.Run. Dedicated starts a private server that a test may stop and restart (fault injection).
package testminio

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testenv"
)

// Server is one running (or stopped) MinIO with a fixed address, data dir and credentials.
type Server struct {
	Endpoint  string // host:port on 127.0.0.1
	AccessKey string
	SecretKey string

	bin, dir string
	mu       sync.Mutex
	cmd      *exec.Cmd
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Binary returns the path of the cached MinIO binary, or an error telling how to install it.
func Binary() (string, error) {
	tools := os.Getenv("STEWARD_TOOLS")
	if tools == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		tools = filepath.Join(root, ".tools")
	}
	bin := filepath.Join(tools, "minio")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("minio binary not found at %s: run scripts/minio.sh install: %w", bin, err)
	}
	return bin, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testminio: go.mod not found above working directory")
		}
		dir = parent
	}
}

// Shared returns the test binary's shared server, skipping (or failing under
// STEWARD_REQUIRE_REAL=1) when MinIO cannot be started.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		var dir string
		dir, sharedErr = os.MkdirTemp("", "steward-minio-")
		if sharedErr != nil {
			return
		}
		shared, sharedErr = start(dir)
	})
	if sharedErr != nil {
		testenv.Unavailable(t, "MinIO unavailable: "+sharedErr.Error())
	}
	return shared
}

// Cleanup stops the shared server, if one was started, and removes its data. Call it from TestMain.
func Cleanup() {
	if shared != nil {
		shared.Stop()
		os.RemoveAll(shared.dir)
	}
}

// Dedicated starts a private server for t, stopped and removed when t ends.
func Dedicated(t testing.TB) *Server {
	t.Helper()
	s, err := start(t.TempDir())
	if err != nil {
		testenv.Unavailable(t, "MinIO unavailable: "+err.Error())
	}
	t.Cleanup(s.Stop)
	return s
}

func start(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  fmt.Sprintf("127.0.0.1:%d", port),
		AccessKey: "steward" + randHex(6),
		SecretKey: randHex(24),
		bin:       bin,
		dir:       dir,
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Start (re)starts a stopped server on the same address, data and credentials.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "minio.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	console, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "server", "--quiet", "--address", s.Endpoint,
		"--console-address", fmt.Sprintf("127.0.0.1:%d", console), filepath.Join(s.dir, "data"))
	cmd.Env = []string{
		"MINIO_ROOT_USER=" + s.AccessKey, "MINIO_ROOT_PASSWORD=" + s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "HOME=" + s.dir, "PATH=/usr/bin:/bin",
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = serverAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start minio: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	// health/ready can answer 200 while the object layer still says 503 "Server not
	// initialized"; an unsigned GET / is answered by that layer (403 AccessDenied once it is
	// up), so wait for both.
	ready := func() bool { return status(s.Endpoint, "/minio/health/ready") == http.StatusOK }
	initialized := func() bool {
		code := status(s.Endpoint, "/")
		return code != 0 && code != http.StatusServiceUnavailable
	}
	for _, up := range []func() bool{ready, initialized} {
		if err := waitFor(up, exited, deadline); err != nil {
			_ = cmd.Process.Kill()
			if errors.Is(err, errExited) {
				log, _ := os.ReadFile(filepath.Join(s.dir, "minio.log"))
				return fmt.Errorf("%w: %s", err, log)
			}
			return err
		}
	}
	s.cmd = cmd
	go func() { <-exited }()
	return nil
}

var errExited = errors.New("minio exited")

// waitFor polls up every 50ms until it holds, the server exits or deadline passes.
func waitFor(up func() bool, exited <-chan error, deadline time.Time) error {
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("%w (%v)", errExited, err)
		default:
		}
		if up() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("minio not ready after 30s")
}

// status returns the HTTP status of an unsigned GET of path, or 0 if the request failed.
func status(endpoint, path string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + endpoint + path)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Stop kills the server (SIGKILL: tests use it to simulate an outage) and waits for its port to close.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout("tcp", s.Endpoint, 50*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd = nil
}

// URL returns the server as an http URL.
func (s *Server) URL() string { return "http://" + s.Endpoint }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
