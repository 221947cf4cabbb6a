package host_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv("STEWARD_TEST_HOST_MODE"); mode != "" {
		os.Exit(runHostHelper(mode))
	}
	cleanState := testbin.PrivateState()
	code := m.Run()
	cleanState()
	testbin.Cleanup()
	os.Exit(code)
}

type launcher struct {
	name   string
	launch func(context.Context, host.Config) (*host.Client, error)
	cfg    func(host.Config) host.Config
}

func launchers() []launcher {
	same := func(c host.Config) host.Config { return c }
	return []launcher{
		{"go-plugin", host.Launch, same},
		{"stdio", host.LaunchStdio, same},
		{"stdio-ndjson", host.LaunchStdio, func(c host.Config) host.Config { c.Framing = rpc.NewlineDelimited; return c }},
	}
}

func quietLogger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Warn, Output: os.Stderr})
}

func TestLaunchHelloMetricsShutdown(t *testing.T) {
	bin := testbin.Steward(t)
	for _, l := range launchers() {
		t.Run(l.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := l.launch(ctx, l.cfg(host.Config{Path: bin, Logger: quietLogger()}))
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			defer c.Close()
			h, err := c.Hello(ctx)
			if err != nil {
				t.Fatalf("hello: %v", err)
			}
			if h.ProtocolVersion != rpc.ProtocolVersion || len(h.Epoch) != 32 || h.Pid != c.Pid() || h.Version == "" {
				t.Fatalf("hello result %+v (sidecar pid %d)", h, c.Pid())
			}
			if h.Epoch != c.Epoch() {
				t.Fatalf("epoch changed between calls: %s vs %s", h.Epoch, c.Epoch())
			}
			text, err := c.Metrics(ctx)
			if err != nil {
				t.Fatalf("metrics: %v", err)
			}
			for _, want := range []string{
				`steward_rpc_requests_total{code="0",method="steward.hello"}`,
				`steward_build_info{epoch="` + h.Epoch + `"`,
				"# TYPE steward_rpc_request_duration_seconds histogram",
			} {
				if !strings.Contains(text, want) {
					t.Fatalf("metrics lack %q:\n%s", want, text)
				}
			}
			var res rpc.HelloResult
			err = c.Call(ctx, rpc.MethodHello, rpc.HelloParams{ProtocolVersion: 99}, &res)
			if !errors.Is(err, rpc.ErrUnsupportedProtocol) {
				t.Fatalf("hello v99: want ErrUnsupportedProtocol, got %v", err)
			}
			if err := c.Call(ctx, "no.such.method", nil, nil); !errors.Is(err, rpc.ErrMethodNotFound) {
				t.Fatalf("unknown method: want ErrMethodNotFound, got %v", err)
			}
			if err := c.Shutdown(ctx, "test done"); err != nil {
				t.Fatalf("shutdown: %v", err)
			}
			select {
			case <-c.Exited():
			default:
				t.Fatal("Shutdown returned before the sidecar exited")
			}
			if alive(c.Pid()) {
				t.Fatalf("sidecar %d still running after shutdown", c.Pid())
			}
		})
	}
}

func TestEpochDiffersPerProcess(t *testing.T) {
	bin := testbin.Steward(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		c, err := host.LaunchStdio(ctx, host.Config{Path: bin, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if seen[c.Epoch()] {
			t.Fatalf("epoch %s repeated", c.Epoch())
		}
		seen[c.Epoch()] = true
		c.Close()
	}
}

// TestSidecarDiesWithSIGKILLedHost runs a real host process (this test binary in host mode), lets
// it launch a sidecar, SIGKILLs the host and requires the sidecar gone within 2 s.
func TestSidecarDiesWithSIGKILLedHost(t *testing.T) {
	bin := testbin.Steward(t)
	// "raw" starts the sidecar like a host in another language would: plain fork/exec, no
	// PDEATHSIG, so only the sidecar's own watch of its parent (pidfd) and stdin EOF bring it down.
	for _, mode := range []string{"plugin", "stdio", "raw"} {
		t.Run(mode, func(t *testing.T) {
			cmd, pid := startHostHelper(t, mode, bin)
			start := startTime(pid)
			if start == "" || !alive(pid) {
				t.Fatalf("sidecar %d not running before the host was killed", pid)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			for alive(pid) && startTime(pid) == start {
				if time.Since(killed) > 2*time.Second {
					t.Fatalf("sidecar %d still running 2 s after its host was SIGKILLed", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("sidecar gone %v after the host's SIGKILL", time.Since(killed).Round(time.Millisecond))
		})
	}
}

// startHostHelper starts this test binary as a host process in mode (runHostHelper) and returns
// it with the pid of the sidecar it launched. The helper is killed and reaped at cleanup.
func startHostHelper(t *testing.T, mode, bin string, env ...string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "STEWARD_TEST_HOST_MODE="+mode, "STEWARD_TEST_BIN="+bin), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("host helper said nothing: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		t.Fatalf("host helper printed %q", line)
	}
	return cmd, pid
}

// runHostHelper is the body of the host process in TestSidecarDiesWithSIGKILLedHost.
func runHostHelper(mode string) int {
	if transport, ok := strings.CutSuffix(mode, "-busy"); ok {
		return runBusyHost(transport)
	}
	ctx := context.Background()
	cfg := host.Config{Path: os.Getenv("STEWARD_TEST_BIN"), Logger: quietLogger()}
	if mode == "raw" {
		cmd := exec.Command(cfg.Path, "serve")
		if _, err := cmd.StdinPipe(); err != nil { // held open: EOF only when this process dies
			return 1
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "host helper:", err)
			return 1
		}
		fmt.Println(cmd.Process.Pid)
		select {}
	}
	launch := host.LaunchStdio
	if mode == "plugin" {
		launch = host.Launch
	}
	c, err := launch(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "host helper:", err)
		return 1
	}
	fmt.Println(c.Pid())
	select {} // wait to be SIGKILLed
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}

// startTime returns field 22 of /proc/<pid>/stat, to tell a process from a later one with its pid.
func startTime(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
