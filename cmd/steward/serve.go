package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cba1309c/steward/plugin"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/hashicorp/go-hclog"
)

func runServe(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	framing := fs.String("framing", "content-length", "stdio framing: content-length or ndjson")
	maxFrame := fs.Int("max-frame", rpc.DefaultMaxFrame, "largest JSON-RPC message in bytes, both directions")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
	grace := fs.Duration("shutdown-grace", 60*time.Second, "how long a graceful shutdown waits for in-flight calls")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fr, err := rpc.ParseFraming(*framing)
	if err != nil {
		fmt.Fprintln(stderr, "steward serve:", err)
		return 2
	}
	// Logs are JSON on stderr in both modes: stdout belongs to the protocol (stdio) or to go-plugin's
	// handshake, and go-plugin re-emits the plugin's stderr lines under the plugin's name.
	logger := hclog.New(&hclog.LoggerOptions{
		Name: "steward", JSONFormat: true, Output: os.Stderr, Level: hclog.LevelFromString(*logLevel),
	})
	srv, err := sidecar.New(sidecar.Config{
		Logger: logger, Version: buildVersion(), Framing: fr, MaxFrame: *maxFrame, ShutdownGrace: *grace,
	})
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	if plugin.Launched() {
		err = srv.RunPlugin(ctx)
	} else {
		err = srv.RunStdio(ctx, os.Stdin, os.Stdout)
	}
	if err != nil {
		logger.Error("stopped with an error", "error", err)
		return 1
	}
	logger.Info("stopped")
	return 0
}
