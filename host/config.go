package host

import (
	"encoding/json"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// Config configures how a sidecar is started.
type Config struct {
	// Path is the steward executable. Required.
	Path string
	// Args are extra flags for "steward serve" (e.g. "--log-level=debug").
	Args []string
	// Env is the sidecar's environment in KEY=VALUE form. Nil means the host's environment; the
	// sidecar never passes it on to its workers, which get an allow-listed environment of their own.
	Env []string
	// Logger receives the sidecar's log lines (re-emitted under its name) and the host's own.
	// Default: hclog at info on stderr.
	Logger hclog.Logger
	// Framing of the stdio transport (LaunchStdio only). Default rpc.ContentLength.
	Framing rpc.Framing
	// MaxFrame bounds one message in bytes; keep it equal to the sidecar's. Default 4 MiB.
	MaxFrame int
	// StartTimeout bounds launching plus the hello handshake. Default 30s.
	StartTimeout time.Duration
	// KillGrace is how long Close waits for a graceful exit before SIGKILL. Default 5s.
	KillGrace time.Duration
	// OnNotify receives notifications from the sidecar, such as $/progress. It must not block.
	OnNotify func(method string, params json.RawMessage)
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "host", Level: hclog.Info})
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = rpc.DefaultMaxFrame
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 5 * time.Second
	}
	return c
}
