// Command gohello is the smallest Go host: it launches the steward sidecar through go-plugin
// (AutoMTLS on), says hello, reads the sidecar's metrics and prints both for a person, then shuts
// the sidecar down gracefully.
//
//	go run ./examples/gohello --steward bin/steward
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/hashicorp/go-hclog"
)

func main() {
	path := flag.String("steward", "bin/steward", "path of the steward binary")
	flag.Parse()
	if err := run(*path, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gohello:", err)
		os.Exit(1)
	}
}

func run(path string, out io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	c, err := host.Launch(ctx, host.Config{
		Path:   path,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "gohello", Level: hclog.Warn}),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	launched := time.Since(start)
	h := c.Info()

	fmt.Fprintf(out, "steward sidecar launched through go-plugin (AutoMTLS) in %v\n\n", launched.Round(100*time.Microsecond))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  protocol version\t%d\n", h.ProtocolVersion)
	fmt.Fprintf(tw, "  build version\t%s\n", h.Version)
	fmt.Fprintf(tw, "  sidecar pid\t%d\n", h.Pid)
	fmt.Fprintf(tw, "  epoch\t%s\n", h.Epoch)
	fmt.Fprintf(tw, "  capabilities\t%s\n", strings.Join(h.Capabilities, ", "))
	if h.Limits != nil {
		fmt.Fprintf(tw, "  max frame\t%d KiB\n", h.Limits.MaxFrameBytes/1024)
	}
	if iso := h.Isolation; iso != nil {
		fmt.Fprintf(tw, "  isolation\t%s (verified: %v) %s\n", iso.Mode, iso.Verified, iso.Reason)
	}
	tw.Flush()

	text, err := c.Metrics(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nmetrics (steward_* series of %d lines of Prometheus text):\n", strings.Count(text, "\n"))
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	var rows []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "steward_") && !strings.Contains(line, "_bucket{") {
			name, value, _ := strings.Cut(line, " ")
			rows = append(rows, fmt.Sprintf("  %s\t%s", name, value))
		}
	}
	sort.Strings(rows)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()

	if err := c.Shutdown(ctx, "gohello done"); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	fmt.Fprintln(out, "\nsidecar shut down gracefully")
	return nil
}
