package plugin_test

import (
	"bufio"
	"context"
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

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/plugin"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"golang.org/x/sys/unix"
)

// hostHelperEnv makes this test binary a host process: "plain" (hashicorp/go-plugin's client
// and nothing of steward's host package) or "steward" (host.Launch). It loads the sidecar
// named by hostBinEnv with its state in hostStateEnv, prints "ready <sidecar pid>" and waits to
// be killed.
const (
	hostHelperEnv = "STEWARD_TEST_PLUGIN_HOST"
	hostBinEnv    = "STEWARD_TEST_PLUGIN_HOST_BIN"
	hostStateEnv  = "STEWARD_TEST_PLUGIN_HOST_STATE"
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(hostHelperEnv); kind != "" {
		if err := runHost(kind, os.Getenv(hostBinEnv), os.Getenv(hostStateEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "plugin host:", err)
			os.Exit(1)
		}
		select {} // until killed
	}
	os.Exit(m.Run())
}

func runHost(kind, bin, state string) error {
	args := []string{"serve", "--state-dir", state, "--cgroup-parent", "auto"}
	if kind == "steward" {
		c, err := host.Launch(context.Background(), host.Config{Path: bin, Args: args[1:], Logger: hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: hclog.Warn})})
		if err != nil {
			return err
		}
		fmt.Println("ready", c.Pid())
		return nil
	}
	c := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake,
		Plugins:          plugin.PluginMap(),
		Cmd:              exec.Command(bin, args...),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolNetRPC},
		AutoMTLS:         true,
		Logger:           hclog.NewNullLogger(),
	})
	proto, err := c.Client()
	if err != nil {
		return err
	}
	conn, err := plugin.DialStream(proto)
	if err != nil {
		return err
	}
	_ = conn // held open until the process is killed
	fmt.Println("ready", c.ReattachConfig().Pid)
	return nil
}

// TestKilledHostLeavesNoLitter: a host SIGKILLed while its sidecar runs leaves no go-plugin
// socket and no socket folder in the temp dir, over runs of a plain go-plugin host (the sidecar
// notices its parent's death and removes its folder on the way down), runs where the sidecar is
// SIGKILLed first (its folder is swept by the next sidecar's start) and runs of steward's own
// host (its folder is swept by the next start). A dead socket and a folder that are not a
// steward owner's are never touched.
func TestKilledHostLeavesNoLitter(t *testing.T) {
	bin := testbin.Steward(t)
	// Short: a socket's path is at most 107 bytes, and t.TempDir's are long.
	tmp, err := os.MkdirTemp("", "litter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	foreign := plantForeign(t, tmp)
	runs := []struct {
		host        string
		killSidecar bool
	}{
		{"plain", false}, {"plain", true}, {"plain", false}, {"steward", false},
		{"steward", true}, {"plain", true}, {"plain", false}, {"plain", false},
	}
	for i, r := range runs {
		killedHost(t, bin, tmp, r.host, r.killSidecar)
		t.Logf("run %d (%s host, sidecar SIGKILLed: %v): litter %v", i+1, r.host, r.killSidecar, testbin.PluginLeftovers(t, tmp, foreign...))
	}
	if got := testbin.PluginLeftovers(t, tmp, foreign...); len(got) > 0 {
		t.Errorf("after %d killed hosts the temp dir holds %d leftovers: %v", len(runs), len(got), got)
	}
	for _, p := range foreign {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s, not a steward owner's, was removed: %v", p, err)
		}
	}
}

// killedHost starts a host of kind with TMPDIR=tmp, SIGKILLs it (and first its sidecar, if
// killSidecar) and waits until the sidecar has exited.
func killedHost(t *testing.T, bin, tmp, kind string, killSidecar bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, hostHelperEnv+"="+kind, hostBinEnv+"="+bin, hostStateEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(line), "ready "))
	if err != nil || perr != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("host said %q (%v)", line, err)
	}
	// The sidecar is the host's child and unreaped while the host lives: the pidfd is its own.
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	if killSidecar {
		if err := unix.PidfdSendSignal(pfd, unix.SIGKILL, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	_ = cmd.Wait()
	fds := []unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 100)
		if n > 0 {
			return
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
		if ctx.Err() != nil {
			t.Fatalf("the sidecar (pid %d) outlived its killed host", pid)
		}
	}
}

// plantForeign makes what the sweep must leave alone: a dead go-plugin socket of some other
// program, and a folder named like a socket folder but of no owner.
func plantForeign(t *testing.T, dir string) []string {
	t.Helper()
	sock := filepath.Join(dir, "plugin424242")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	other := filepath.Join(dir, "steward-plugin-notanowner")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	return []string{sock, other}
}
