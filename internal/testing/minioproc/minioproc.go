// Package minioproc runs a real MinIO server on 127.0.0.1 as a child process that can be stopped
// and started again on the same address, data directory and credentials: the outage a fault
// campaign or a test injects. It owns the process and its readiness check, nothing else; it
// never builds or imports MinIO (scripts/minio.sh builds the binary into .tools/).
package minioproc

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
	"time"

	"github.com/cba1309c/steward/internal/lockedproc"
)

// ErrExited: the server exited before it became ready.
var ErrExited = errors.New("minio exited")

// readyTimeout bounds one start, from exec to a server that answers S3 requests.
const readyTimeout = 30 * time.Second

// Server is one MinIO with a fixed address, data directory and credentials, running or stopped.
type Server struct {
	Endpoint  string // host:port on 127.0.0.1
	AccessKey string
	SecretKey string

	bin, dir string
	mu       sync.Mutex
	cmd      *exec.Cmd
	done     chan struct{} // closed once cmd is reaped
}

// New prepares a server of binary bin keeping its data and log under dir, on a free port with
// random credentials, without starting it.
func New(bin, dir string) (*Server, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("minio binary: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	return &Server{
		Endpoint:  fmt.Sprintf("127.0.0.1:%d", port),
		AccessKey: "steward" + randHex(6),
		SecretKey: randHex(24),
		bin:       bin,
		dir:       dir,
	}, nil
}

// Start prepares a server (see New) and starts it.
func Start(bin, dir string) (*Server, error) {
	s, err := New(bin, dir)
	if err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir is the directory holding the server's data and log.
func (s *Server) Dir() string { return s.dir }

// CPU is the user and system CPU time the running server has taken so far, to the clock tick
// (10 ms): a benchmark's measure of the work a request cost the server, whose CPUs on a test
// machine are the client's too.
func (s *Server) CPU() (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0, errors.New("minio is not running")
	}
	return cpuOf(s.cmd.Process.Pid)
}

// URL returns the server as an http URL.
func (s *Server) URL() string { return "http://" + s.Endpoint }

// Running reports whether the server was started, not stopped since, and has not exited.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Start (re)starts a stopped server on the same address, data and credentials, and returns once
// it serves S3 requests. Starting a running server does nothing; a server that died by itself
// is started again.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		select {
		case <-s.done:
			s.cmd = nil // it died by itself: start it again
		default:
			return nil
		}
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	logPath := filepath.Join(s.dir, "minio.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
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
	exited, done := make(chan error, 1), make(chan struct{})
	if err := lockedproc.Start(cmd, exited, done); err != nil {
		return fmt.Errorf("start minio: %w", err)
	}
	if err := waitReady(s.Endpoint, exited); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if errors.Is(err, ErrExited) {
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("%w: %s", err, log)
		}
		return err
	}
	s.cmd, s.done = cmd, done
	return nil
}

// waitReady waits until health/ready answers 200 and the object layer no longer answers 503.
// health/ready can answer 200 while the object layer still says 503 "Server not initialized";
// an unsigned GET / is answered by that layer (403 AccessDenied once it is up), so wait for both.
func waitReady(endpoint string, exited <-chan error) error {
	deadline := time.Now().Add(readyTimeout)
	ready := func() bool { return status(endpoint, "/minio/health/ready") == http.StatusOK }
	initialized := func() bool {
		code := status(endpoint, "/")
		return code != 0 && code != http.StatusServiceUnavailable
	}
	for _, up := range []func() bool{ready, initialized} {
		if err := waitFor(up, exited, deadline); err != nil {
			return err
		}
	}
	return nil
}

// waitFor polls up every 50ms until it holds, the server exits or deadline passes.
func waitFor(up func() bool, exited <-chan error, deadline time.Time) error {
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return fmt.Errorf("%w (%v)", ErrExited, err)
		default:
		}
		if up() {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("minio not ready after %s", readyTimeout)
}

// status returns the HTTP status of an unsigned GET of path, or 0 if the request failed.
func status(endpoint, path string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + endpoint + path)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Stop kills the server's process group with SIGKILL (an outage, not a shutdown: nothing is
// flushed on purpose), reaps it, and waits for its port to close. Stopping a stopped server does
// nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	for range 100 {
		c, err := net.DialTimeout("tcp", s.Endpoint, 50*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(20 * time.Millisecond)
	}
	s.cmd = nil
}

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
