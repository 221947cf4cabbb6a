package minioproc_test

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/minioproc"
	"github.com/cba1309c/steward/internal/testenv"
)

func binary(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("STEWARD_TOOLS")
	if dir == "" {
		dir = filepath.Join("..", "..", ".tools")
	}
	bin := filepath.Join(dir, "minio")
	if _, err := os.Stat(bin); err != nil {
		testenv.Unavailable(t, "minio binary missing (scripts/minio.sh install): "+err.Error())
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
