package host

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/cba1309c/steward/plugin"
	"github.com/cba1309c/steward/rpc"
	goplugin "github.com/hashicorp/go-plugin"
)

// Launch starts the sidecar through go-plugin (AutoMTLS on, net/rpc control channel, the sidecar's
// logs re-emitted through cfg.Logger) and opens a JSON-RPC stream on the MuxBroker. go-plugin alone
// leaves the plugin running when the host is SIGKILLed; PDEATHSIG and the sidecar's own watch of
// its parent close that gap.
//
// Each sidecar gets a private socket folder (plugin.MakeSocketDir: named after this process, so
// that the next host or sidecar sweeps it if this process is killed), which the host removes as
// soon as that sidecar has exited, however it ended; a SIGKILLed sidecar cannot remove its own.
func Launch(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if cfg.Path == "" {
		return nil, fmt.Errorf("%w: Path is required", ErrConfig)
	}
	sockDir, err := plugin.MakeSocketDir(os.TempDir())
	if sockDir == "" {
		return nil, fmt.Errorf("%w: socket dir: %w", ErrLaunch, err)
	}
	if err != nil {
		cfg.Logger.Warn("sweeping the socket folders of dead hosts", "error", err)
	}
	cmd := exec.Command(cfg.Path, append([]string{"serve", "--max-frame", strconv.Itoa(cfg.MaxFrame)}, cfg.Args...)...)
	// go-plugin adds its own cookie and PLUGIN_* variables; with SkipHostEnv it adds nothing else,
	// so the sidecar's environment is exactly cfg.Env (or the host's) plus those.
	cmd.Env = append(withoutPluginCookie(cfg.Env), goplugin.EnvUnixSocketDir+"="+sockDir)
	withPdeathsig(cmd)
	pc := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  plugin.Handshake,
		Plugins:          plugin.PluginMap(),
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolNetRPC},
		AutoMTLS:         true,
		Logger:           cfg.Logger.Named("sidecar"),
		StartTimeout:     cfg.StartTimeout,
	})
	p := &pluginProcess{client: pc, cmd: cmd, sockDir: sockDir, done: make(chan struct{})}
	var proto goplugin.ClientProtocol
	err = startLocked(func() error {
		var err error
		proto, err = pc.Client()
		return err
	}, p.hold)
	if err != nil {
		pc.Kill()
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("%w: go-plugin start: %w", ErrLaunch, err)
	}
	conn, err := plugin.DialStream(proto)
	if err != nil {
		p.kill(ctx)
		return nil, fmt.Errorf("%w: %w", ErrLaunch, err)
	}
	return connect(ctx, cfg, conn, rpc.ContentLength, p)
}

type pluginProcess struct {
	client  *goplugin.Client
	cmd     *exec.Cmd
	sockDir string // the sidecar's private PLUGIN_UNIX_SOCKET_DIR
	done    chan struct{}
}

// hold keeps the starting thread (and so PDEATHSIG) alive until the plugin has exited, then
// removes its socket directory. go-plugin reaps the process itself and exposes only a flag, hence
// the poll.
func (p *pluginProcess) hold() {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !p.client.Exited() {
		<-t.C
	}
	os.RemoveAll(p.sockDir)
	close(p.done)
}

func (p *pluginProcess) pid() int { return p.cmd.Process.Pid }

func (p *pluginProcess) exited() <-chan struct{} { return p.done }

// kill asks the plugin to quit over go-plugin's control channel, which waits up to 2 s before it
// kills the process itself.
func (p *pluginProcess) kill(context.Context) error {
	p.client.Kill()
	<-p.done
	return nil
}
