package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/plugin"
	"github.com/hashicorp/go-hclog"
)

// LaunchStdio starts "steward serve" directly and speaks JSON-RPC on its stdin/stdout, as a host in
// any language would. The sidecar gets PDEATHSIG from a thread that lives as long as it does, and
// exits on stdin EOF besides.
func LaunchStdio(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if cfg.Path == "" {
		return nil, fmt.Errorf("%w: Path is required", ErrConfig)
	}
	args := append([]string{"serve", "--framing", cfg.Framing.String(), "--max-frame", strconv.Itoa(cfg.MaxFrame)}, cfg.Args...)
	cmd := exec.Command(cfg.Path, args...)
	cmd.Env = withoutPluginCookie(cfg.Env)
	withPdeathsig(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLaunch, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLaunch, err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrLaunch, err)
	}
	p := &stdioProcess{cmd: cmd, stdin: stdin, done: make(chan struct{}), grace: cfg.KillGrace}
	err = startLocked(cmd.Start, func() {
		forwardLogs(cfg.Logger.Named("sidecar"), stderr)
		p.waitErr = cmd.Wait()
		close(p.done)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: start %s: %w", ErrLaunch, cfg.Path, err)
	}
	return connect(ctx, cfg, struct {
		io.Reader
		io.Writer
		io.Closer
	}{stdout, stdin, stdin}, cfg.Framing, p)
}

type stdioProcess struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	done    chan struct{}
	waitErr error
	grace   time.Duration
}

func (p *stdioProcess) pid() int                { return p.cmd.Process.Pid }
func (p *stdioProcess) exited() <-chan struct{} { return p.done }

// kill closes stdin (the sidecar's signal to stop), waits for a graceful exit, then SIGKILLs. Go's
// os.Process signals through a pidfd, so a recycled pid is never hit.
func (p *stdioProcess) kill(ctx context.Context) error {
	p.stdin.Close()
	select {
	case <-p.done:
		return nil
	case <-time.After(p.grace):
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	return nil
}

// forwardLogs re-emits the sidecar's JSON log lines through the host's logger, as go-plugin does in
// plugin mode. It returns at EOF.
func forwardLogs(log hclog.Logger, r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		logLine(log, sc.Bytes())
	}
	_, _ = io.Copy(io.Discard, r) // an over-long line: keep draining so the sidecar never blocks
}

func withoutPluginCookie(env []string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, plugin.Handshake.MagicCookieKey+"=") || strings.HasPrefix(kv, "PLUGIN_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}
