// Package testminio runs a real MinIO server on 127.0.0.1 for tests, through internal/testing/minioproc.
// The binary is built once by scripts/minio.sh into .tools/ (or $STEWARD_TOOLS); this package
// never builds or imports MinIO.
//
// Shared returns one server per test binary, started lazily; call Cleanup from TestMain after
// m.Run. Dedicated starts a private server that a test may stop and restart (fault injection).
package testminio

import (
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/minioproc"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
)

// Server is one running (or stopped) MinIO with a fixed address, data dir and credentials.
type Server struct {
	Endpoint  string // host:port on 127.0.0.1
	AccessKey string
	SecretKey string

	p *minioproc.Server
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Binary returns the path of the cached MinIO binary, or an error telling how to install it.
func Binary() (string, error) { return testbin.Tool("minio", "scripts/minio.sh install") }

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
		os.RemoveAll(shared.p.Dir())
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
	p, err := minioproc.Start(bin, dir)
	if err != nil {
		return nil, err
	}
	return &Server{Endpoint: p.Endpoint, AccessKey: p.AccessKey, SecretKey: p.SecretKey, p: p}, nil
}

// Start (re)starts a stopped server on the same address, data and credentials.
func (s *Server) Start() error { return s.p.Start() }

// CPU is the CPU time the running server has taken so far (see minioproc.Server.CPU).
func (s *Server) CPU() (time.Duration, error) { return s.p.CPU() }

// Stop kills the server (SIGKILL: tests use it to simulate an outage) and waits for its port to close.
func (s *Server) Stop() { s.p.Stop() }
