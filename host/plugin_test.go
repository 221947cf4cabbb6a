package host_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
)

// The go-plugin socket of a sidecar is removed by the host that launched it once the sidecar has
// exited: SIGKILLed (go-plugin's server never removes its socket then; it used to stay in the
// temp dir as plugin<digits>) or shut down.
func TestPluginSocketRemoved(t *testing.T) {
	bin := testbin.Steward(t) // built before TMPDIR moves
	for _, end := range []string{"sigkill", "close"} {
		t.Run(end, func(t *testing.T) {
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp) // the host's temp dir, and the sidecar's (it inherits the environment)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := host.Launch(ctx, host.Config{Path: bin, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := testbin.PluginLeftovers(t, tmp); len(got) == 0 {
				t.Fatalf("no go-plugin socket under %s while the sidecar runs: the test proves nothing", tmp)
			}
			if end == "sigkill" {
				proc, err := os.FindProcess(c.Pid()) // a pidfd on Linux: never another process
				if err != nil {
					t.Fatal(err)
				}
				if err := proc.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				select {
				case <-c.Exited():
				case <-ctx.Done():
					t.Fatal("the SIGKILLed sidecar was not reaped")
				}
			} else if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if got := testbin.PluginLeftovers(t, tmp); len(got) > 0 {
				t.Fatalf("left behind after the sidecar exited: %v", got)
			}
		})
	}
}
