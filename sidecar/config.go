package sidecar

import (
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// Config configures a sidecar. The zero value is usable: every field has a documented default.
type Config struct {
	// Logger receives JSON logs (stderr in both modes). Default: hclog JSON on os.Stderr at info.
	Logger hclog.Logger
	// Version is the build version reported by steward.hello. Default "dev".
	Version string
	// Framing of the stdio transport. Default rpc.ContentLength. (go-plugin streams always use
	// Content-Length framing.)
	Framing rpc.Framing
	// MaxFrame bounds one JSON-RPC message in bytes, both directions. Default rpc.DefaultMaxFrame (4 MiB).
	MaxFrame int
	// MaxInFlight bounds requests handled at once; excess requests get rpc.ErrOverloaded. Default 1024.
	MaxInFlight int
	// ShutdownGrace bounds how long a graceful shutdown waits for in-flight calls. Default 60s.
	ShutdownGrace time.Duration
	// WatchParent makes the sidecar exit when the process that started it exits (pidfd on Linux).
	// Default on; tests that embed a sidecar in-process turn it off with DisableParentWatch.
	DisableParentWatch bool
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "steward", JSONFormat: true, Level: hclog.Info})
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = rpc.DefaultMaxFrame
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1024
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 60 * time.Second
	}
	return c
}
