// Command steward-campaign runs a randomized fault campaign against real steward sidecars and a
// MinIO it starts, prints the outcome table and the checker's verdict, and exits non-zero on any
// violation (internal/testing/campaign). It is a test tool: the steward binary links none of it.
//
//	steward-campaign [flags]              sidecars of --steward, one in-process dispatcher
//	steward-campaign --engine lance --segments [flags]   segmented index builds, faults in their steps
//	steward-campaign --failover [flags]   host processes on a shared 3-member etcd journal
//	steward-campaign --failover --engine lance --segments [flags]   segmented builds on them
//	steward-campaign node                 one failover host process, started by the campaign
//
// `make campaign` builds it into bin/ beside bin/steward, where it finds its sidecars' executable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cba1309c/steward/internal/testing/campaign"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs a campaign, or with the argument "node" one host process of a failover campaign.
//
// With --failover it runs the failover campaign: --hosts host processes (`steward-campaign
// node`, re-runs of this executable, each a dispatcher with its own sidecar) on one journal in a
// 3-member etcd cluster it starts (etcd from --etcd-bin), SIGKILLing and SIGSTOPping hosts and
// killing etcd members.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "node" {
		return campaign.NodeMain(ctx, os.Stdin, stdout, stderr)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "steward-campaign: cannot find this executable:", err)
		return 1
	}
	// Where scripts/*.sh install MinIO, etcd and the Lance venv (a checkout's .tools by default).
	tools := envOr("STEWARD_TOOLS", ".tools")
	fs := flag.NewFlagSet("steward-campaign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	steward := fs.String("steward", filepath.Join(filepath.Dir(self), "steward"), "steward executable the sidecars run as (make build; default: beside this one)")
	mutations := fs.Int("mutations", 200, "randomized mutations to submit")
	seed := fs.Int64("seed", 1, "seed of every random choice (operations, faults, delays)")
	minioBin := fs.String("minio-bin", filepath.Join(tools, "minio"), "MinIO executable (scripts/minio.sh install builds it)")
	keep := fs.Bool("keep", false, "keep the campaign directory (MinIO data, job store, ledgers, logs)")
	jobLines := fs.Bool("job-lines", false, "after the table, print one line per job: operation, pinned version, answer, resolution")
	workDir := fs.String("workdir", "", "where the campaign directory is made (default $TMPDIR)")
	sidecars := fs.Int("sidecars", 2, "sidecars the dispatcher chooses from")
	datasets := fs.Int("datasets", 3, "datasets the mutations spread over")
	rows := fs.Int64("rows", 0, "rows of each generated dataset (default 20000; 5000 with --engine lance)")
	deadline := fs.Duration("deadline", 0, "execute deadline of every job (must fund the kill budget "+campaign.KillBudget.String()+"; default 8s, 20s with --engine lance)")
	kinds := fs.String("kinds", "", "comma-separated fault kinds to draw from (default all: "+strings.Join(campaign.Kinds(), ",")+
		"; with --engine lance: "+strings.Join(campaign.LanceKinds(), ",")+"; with --failover: "+strings.Join(campaign.FailoverKinds(), ",")+
		"; with --failover --engine lance --segments: "+strings.Join(campaign.SegmentFailoverKinds(), ",")+")")
	engine := fs.String("engine", campaign.EngineBuiltin, "engine of every mutation: builtin, or lance (the Lance engine, registered in every sidecar; the checker reads Lance's version chain)")
	lancePython := fs.String("lance-python", envOr("STEWARD_LANCE_PYTHON", filepath.Join(tools, "lance", "bin", "python")), "with --engine lance: the Lance venv's python (scripts/lance.sh install)")
	lanceDir := fs.String("lance-dir", envOr("STEWARD_LANCE_DIR", filepath.Join("engines", "lance")), "with --engine lance: engines/lance (engine.py, lancectl.py)")
	segments := fs.Bool("segments", false, "with --engine lance: every mutation a segmented index build (TRAIN, SEGMENTs, COMMIT_SEGMENTS through the dispatcher), faults in its steps: "+strings.Join(campaign.SegmentKinds(), ","))
	failover := fs.Bool("failover", false, "the failover campaign: host processes on a shared etcd journal, killed and stopped (with --engine lance --segments: segmented builds submitted through the hosts)")
	hosts := fs.Int("hosts", 3, "with --failover: host processes, each with its own sidecar")
	etcdBin := fs.String("etcd-bin", filepath.Join(tools, "etcd"), "with --failover: etcd executable (scripts/etcd.sh install builds it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "steward-campaign: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if _, err := os.Stat(*steward); err != nil {
		fmt.Fprintf(stderr, "steward-campaign: the sidecars' executable (make build, or --steward): %v\n", err)
		return 2
	}
	cfg := campaign.Config{
		Steward: *steward, Node: self, MinIOBinary: *minioBin, WorkDir: *workDir, Keep: *keep, Mutations: *mutations,
		Seed: *seed, Datasets: *datasets, Rows: *rows, Sidecars: *sidecars, ExecuteDeadline: *deadline,
		Segments: *segments, Progress: progressPrinter(stderr),
	}
	if *kinds != "" {
		cfg.Kinds = strings.Split(*kinds, ",")
	}
	if cfg.Engine = *engine; cfg.Engine == campaign.EngineLance {
		// Absolute: the sidecars run the engine from their own working directory.
		if cfg.Lance.Python, err = filepath.Abs(*lancePython); err == nil {
			cfg.Lance.Dir, err = filepath.Abs(*lanceDir)
		}
		if err != nil {
			fmt.Fprintln(stderr, "steward-campaign:", err)
			return 2
		}
	}
	start := campaign.Run
	if *failover {
		cfg.Hosts, cfg.EtcdBinary, start = *hosts, *etcdBin, campaign.RunFailover
		fmt.Fprintf(stderr, "steward-campaign --failover: engine %s, %d mutations (segmented: %t), seed %d, %d hosts, MinIO %s, etcd %s\n",
			*engine, *mutations, *segments, *seed, *hosts, *minioBin, *etcdBin)
	} else {
		fmt.Fprintf(stderr, "steward-campaign: engine %s, %d mutations (segmented: %t), seed %d, %d sidecars, MinIO %s\n", *engine, *mutations, *segments, *seed, *sidecars, *minioBin)
	}
	rep, err := start(ctx, cfg)
	if rep.Jobs > 0 || len(rep.Violations) > 0 {
		werr := rep.WriteTable(stdout)
		if werr == nil && *jobLines {
			werr = rep.WriteJobs(stdout)
		}
		if werr != nil {
			fmt.Fprintln(stderr, "steward-campaign:", werr)
		}
	}
	switch {
	case errors.Is(err, campaign.ErrConfig):
		fmt.Fprintln(stderr, "steward-campaign:", err)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "steward-campaign:", err)
		return 1
	case !rep.OK():
		return 1
	}
	return 0
}

// envOr is the environment variable key (read as steward itself reads it), or def.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// progressPrinter redraws one status line on a terminal, and prints one line per phase change
// and every 10% of submissions elsewhere.
func progressPrinter(w io.Writer) func(campaign.Progress) {
	tty := false
	if f, ok := w.(*os.File); ok {
		st, err := f.Stat()
		tty = err == nil && st.Mode()&os.ModeCharDevice != 0
	}
	var mu sync.Mutex
	lastPhase, lastTenth := "", -1
	var last time.Time
	return func(p campaign.Progress) {
		mu.Lock()
		defer mu.Unlock()
		var line string
		switch p.Phase {
		case "setup":
			line = "setup     " + p.Detail
		case "drive":
			line = fmt.Sprintf("drive     %d/%d submitted", p.Submitted, p.Total)
		default:
			line = fmt.Sprintf("converge  %d/%d settled, %d UNKNOWN, %s", p.Settled, p.Total, p.Unknown, p.Detail)
		}
		if tty {
			if p.Phase == lastPhase && time.Since(last) < 100*time.Millisecond {
				return
			}
			if lastPhase != "" && p.Phase != lastPhase {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "\r\033[K%s", line)
			lastPhase, last = p.Phase, time.Now()
			return
		}
		tenth := -1
		if p.Phase == "drive" && p.Total > 0 {
			tenth = p.Submitted * 10 / p.Total
		}
		if p.Phase != lastPhase || (tenth != lastTenth && tenth >= 0) || time.Since(last) > 10*time.Second {
			fmt.Fprintln(w, line)
			lastPhase, lastTenth, last = p.Phase, tenth, time.Now()
		}
	}
}
