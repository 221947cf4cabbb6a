package minioproc_test

import (
	"net"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/minioproc"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
)

// binary is the tools dir's MinIO, found from the repository root (or $STEWARD_TOOLS).
func binary(t *testing.T) string {
	t.Helper()
	bin, err := testbin.Tool("minio", "scripts/minio.sh install")
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	return bin
}

// TestStopStartKeepsAddressAndCredentials stops the server (its port closes) and starts it
// again on the same address with the same credentials.
func TestStopStartKeepsAddressAndCredentials(t *testing.T) {
	s, err := minioproc.Start(binary(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	ep, key := s.Endpoint, s.AccessKey
	s.Stop()
	if s.Running() {
		t.Fatal("running after Stop")
	}
	if c, err := net.DialTimeout("tcp", ep, 200*time.Millisecond); err == nil {
		c.Close()
		t.Fatal("port still open after Stop")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if s.Endpoint != ep || s.AccessKey != key || !s.Running() {
		t.Fatalf("restart changed the server: %s %s running=%t", s.Endpoint, s.AccessKey, s.Running())
	}
}

// TestCPUCountsTheServersWork: the server's CPU time grows while it answers requests back to
// back for half a second, by at least two clock ticks and by no more than its CPUs could give
// it in that time (a wrong field reads 0, a wrong unit ten or more times too much); a stopped
// server has none to report.
func TestCPUCountsTheServersWork(t *testing.T) {
	s, err := minioproc.Start(binary(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	before, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for time.Since(start) < 500*time.Millisecond {
				resp, err := http.Get(s.URL() + "/minio/health/live")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	wall := time.Since(start)
	after, err := s.CPU()
	if err != nil {
		t.Fatal(err)
	}
	if used, most := after-before, wall*time.Duration(runtime.NumCPU())+20*time.Millisecond; used < 20*time.Millisecond || used > most {
		t.Fatalf("server CPU %v → %v over %v of requests: want 20ms to %v more", before, after, wall, most)
	}
	s.Stop()
	if _, err := s.CPU(); err == nil {
		t.Fatal("a stopped server reported its CPU time")
	}
}
