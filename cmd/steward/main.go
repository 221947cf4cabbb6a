// Command steward is the steward supervisor sidecar and its tools.
//
//	steward serve      run the sidecar (go-plugin when launched by a go-plugin host, else stdio JSON-RPC)
//	steward doctor     preflight: what this machine lacks for isolated mutations, and what to do
//	steward dataset    create and inspect datasets
//	steward jobs       inspect, release and quarantine a dispatcher's job store
//	steward ledger     quarantine a corrupt ledger slot, the audited way out
//	steward demo       the quickstart: index builds through the sidecar, with an OOM kill on purpose
//	steward version    print the build version, module version, commit and platform
//
// The worker mode that isolated mutations run in is an explicit subcommand too, chosen here and
// never by an init hook. The fault campaign is a test tool of its own (cmd/steward-campaign):
// this binary links no test harness.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/cba1309c/steward/sidecar/worker"
)

func main() {
	// The worker modes, before the signal handlers below (worker.Mode).
	if code, ok := worker.Mode(os.Args[1:]); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "serve":
		return runServe(ctx, args[1:], stderr)
	case "doctor":
		return runDoctor(ctx, args[1:], stdout, stderr)
	case "dataset":
		return runDataset(ctx, args[1:], stdout, stderr)
	case "jobs":
		return runJobs(ctx, args[1:], stdout, stderr)
	case "ledger":
		return runLedger(ctx, args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "lance":
		return runLance(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		return runVersion(stdout)
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "steward: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: steward <command> [flags]

commands:
  demo       build indexes on a generated dataset through the sidecar, with a crash on purpose
  serve      run the sidecar: go-plugin when started by a go-plugin host, JSON-RPC on stdin/stdout otherwise
  doctor     preflight on this machine: cgroups, delegation, pidfd, PDEATHSIG, state dir, --store
  dataset    create | describe | versions: make and inspect datasets
  jobs       list | show | release | quarantine: inspect a dispatcher's durable job store
  ledger     quarantine: move a corrupt ledger slot aside, audited
  lance      install: install the Lance engine (pylance) from this binary into a virtualenv
  version    print the build version, module version, commit and platform

Run "steward <command> -h" for a command's flags.
`)
}

// buildVersion derives a version from the module and VCS stamps the go tool embeds.
// version is stamped by the Makefile (-X main.version); empty means "derive it from build info".
var version string

func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		v += "+" + rev + dirty
	}
	return v
}
