package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/plugin"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/hashicorp/go-hclog"
)

func runServe(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	framing := fs.String("framing", "content-length", "stdio framing: content-length or ndjson")
	maxFrame := fs.Int("max-frame", rpc.DefaultMaxFrame, "largest JSON-RPC message in bytes, both directions")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
	grace := fs.Duration("shutdown-grace", 60*time.Second, "how long a graceful shutdown waits for in-flight calls")
	var iso isolation.Config
	isolationFlags(fs, &iso)
	fs.DurationVar(&iso.TermGrace, "term-grace", 10*time.Second, "SIGTERM to SIGKILL grace of the kill ladder")
	fs.DurationVar(&iso.ReapBound, "reap-bound", 11*time.Second, "bound on killing and reaping a domain")
	executors := fs.Int("executors", 2, "mutations that may run at once")
	memBudget := fs.Int64("memory-budget", 0, "bytes the memory limits of all worker domains (mutations and prestarted spares) may sum to at once; default 80% of the sidecar's cgroup memory limit, else 50% of MemTotal, at least one --worker-memory")
	queue := fs.Int("queue", 16, "admitted mutations that may wait for an executor")
	skew := fs.Duration("clock-skew", time.Second, "host/sidecar clock disagreement reserved in front of every deadline")
	minRun := fs.Duration("min-runnable", time.Second, "least run time a deadline must fund after the kill budget")
	faults := fs.Bool("test-faults", false, "accept injected faults in index.mutate (tests and fault campaigns only)")
	stateDir := fs.String("state-dir", os.Getenv("STEWARD_STATE_DIR"), "durable state directory (object ledger journals); default $STEWARD_STATE_DIR, else /var/lib/steward for root, else $XDG_STATE_HOME/steward")
	ledgerPath := fs.String("ledger-path", "", "pin the object ledger's journal to this file instead of a free slot of --state-dir")
	ledgerCap := fs.Int("ledger-capacity", 65536, "object tickets the ledger may hold at once")
	ledgerQuota := fs.Int("ledger-quota", sidecar.DefaultLedgerQuota, "object tickets one invocation may hold at once")
	own := credentialFlags(fs)
	workerDisk := fs.Int64("worker-disk", sidecar.DefaultWorkerDisk, "bytes one invocation's engine may write to its store through its gateway")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics: PORT or localhost:PORT (loopback), or HOST:PORT as given; default off")
	var engines []sidecar.EngineSpec
	fs.Func("engine", "register an engine, NAME=COMMAND [ARG…] (COMMAND an absolute path; repeatable; builtin is always there)", func(v string) error {
		spec, err := sidecar.ParseEngineFlag(v)
		engines = append(engines, spec)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// stderr is a pipe to the host in both transports (go-plugin's log pipe, or the drain the spec
	// asks stdio hosts for). When the host dies, a log line must not kill the sidecar with SIGPIPE
	// before it has torn its worker domains down: with SIGPIPE notified (to a channel nobody needs
	// to read; delivery never blocks) a write to a broken pipe fails with EPIPE instead. Unlike
	// SIG_IGN, a caught signal is reset to its default in every worker the sidecar execs.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if *memBudget < 0 {
		fmt.Fprintln(stderr, "steward serve: --memory-budget must be a number of bytes > 0 (or 0 for the default)")
		return 2
	}
	fr, err := rpc.ParseFraming(*framing)
	if err != nil {
		fmt.Fprintln(stderr, "steward serve:", err)
		return 2
	}
	if err := refuseEnvKeys(); err != nil {
		fmt.Fprintln(stderr, "steward serve:", err)
		return 2
	}
	creds, source, err := own.load()
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
		Isolation: iso, Executors: *executors, MemoryBudget: *memBudget, QueueCapacity: *queue, ClockSkew: *skew, MinRunnable: *minRun,
		TestFaults: *faults, Engines: engines, StateDir: *stateDir, LedgerPath: *ledgerPath, LedgerCapacity: *ledgerCap,
		MetricsListen: *metricsListen, LedgerQuota: *ledgerQuota, WorkerExecutable: workerExecutable,
		Gateway: gateway.Limits{MaxBytes: *workerDisk},
		// The sidecar's own S3 keys (index.resolve, custody, sweep, and the gateways' upstream for
		// calls on allowed stores) come from a file or a descriptor, go only to the allowed
		// stores, and are never logged.
		S3Credentials: creds, CredentialsSource: source, AllowStores: own.allow,
	})
	if err != nil {
		logger.Error("cannot start", "error", err)
		return 1
	}
	code := 0
	if plugin.Launched() {
		servePlugin(ctx, srv, logger)
	} else if out, err := protocolStdout(); err != nil {
		logger.Error("cannot serve stdio", "error", err)
		code = 1
	} else {
		srv.RunStdio(ctx, os.Stdin, out)
	}
	if cerr := srv.Close(); cerr != nil {
		logger.Error("tearing down worker domains", "error", cerr)
	}
	if code != 0 {
		return code
	}
	logger.Info("stopped")
	return 0
}

// servePlugin serves go-plugin from a socket folder of the sidecar's own (plugin.ServeSocketDir),
// removed on every way down the process can take: go-plugin removes its socket only when its host
// asks it to quit, and a sidecar whose host died would leave it behind.
func servePlugin(ctx context.Context, srv *sidecar.Server, logger hclog.Logger) {
	remove, err := plugin.ServeSocketDir()
	if err != nil {
		logger.Warn("go-plugin socket folder", "error", err)
	}
	srv.RunPlugin(ctx)
	if remove != nil {
		if err := remove(); err != nil {
			logger.Error("removing the go-plugin socket folder", "error", err)
		}
	}
}

// defaultCgroupParent is "steward" for root, which may create cgroups anywhere, and "auto" for
// everyone else, who can only use a cgroup delegated to them (systemd Delegate=yes, a chowned v1
// subtree, a container's cgroup namespace).
func defaultCgroupParent() string {
	if os.Geteuid() == 0 {
		return isolation.DefaultParent
	}
	return isolation.ParentAuto
}

// isolationFlags are the flags that decide the isolation preflight, shared by serve and doctor
// so that doctor's verdict is the sidecar's.
func isolationFlags(fs *flag.FlagSet, iso *isolation.Config) {
	fs.StringVar(&iso.Parent, "cgroup-parent", defaultCgroupParent(),
		"cgroup parent of the worker domains, the same name in every hierarchy, or auto: the sidecar's own delegated cgroup (default auto when not root)")
	fs.Int64Var(&iso.MemoryLimit, "worker-memory", 1<<30, "memory limit of one worker domain in bytes (swap off)")
	fs.Int64Var(&iso.PidsLimit, "worker-pids", 256, "process limit of one worker domain")
	fs.Func("containment", "auto (default: every layer the kernel offers, the missing ones reported), require (refuse to start without every layer) or off (workers share the sidecar's namespaces and uid)", func(v string) error {
		switch isolation.Containment(v) {
		case "auto":
			iso.Containment = isolation.ContainAuto
		case isolation.ContainRequire, isolation.ContainOff:
			iso.Containment = isolation.Containment(v)
		default:
			return fmt.Errorf("want auto, require or off")
		}
		return nil
	})
	fs.BoolFunc("require-containment", "same as --containment require", func(string) error {
		iso.Containment = isolation.ContainRequire
		return nil
	})
	fs.Func("guest-uid", "UID[:GID] on the host that contained workers run as (the root of their user namespace maps to it); default 65534 when root, else the sidecar's own uid", func(v string) error {
		u, g, hasG := strings.Cut(v, ":")
		uid, err := strconv.Atoi(u)
		if err != nil || uid <= 0 {
			return fmt.Errorf("want a uid > 0")
		}
		gid := uid
		if hasG {
			if gid, err = strconv.Atoi(g); err != nil || gid <= 0 {
				return fmt.Errorf("want a gid > 0")
			}
		}
		iso.GuestUID, iso.GuestGID = uid, gid
		return nil
	})
}
