package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/internal/testing/campaign"
	"github.com/hashicorp/go-hclog"
)

// runCampaign runs a randomized fault campaign against real sidecars (this executable) and a
// MinIO it starts, prints the outcome table and the checker's verdict, and exits non-zero on any
// violation.
//
// With --failover it runs the failover campaign instead: --hosts host processes ("steward
// campaign node", re-runs of this executable, each a dispatcher with its own sidecar) on one
// journal in a 3-member etcd cluster it starts (etcd from --etcd-bin), SIGKILLing and SIGSTOPping
// hosts and killing etcd members.
func runCampaign(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "node" {
		return runCampaignNode(ctx, stdout, stderr)
	}
	fs := flag.NewFlagSet("campaign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mutations := fs.Int("mutations", 200, "randomized mutations to submit")
	seed := fs.Int64("seed", 1, "seed of every random choice (operations, faults, delays)")
	minioBin := fs.String("minio-bin", ".tools/minio", "MinIO executable (scripts/minio.sh install builds it)")
	keep := fs.Bool("keep", false, "keep the campaign directory (MinIO data, job store, ledgers, logs)")
	jobLines := fs.Bool("job-lines", false, "after the table, print one line per job: operation, pinned version, answer, resolution")
	workDir := fs.String("workdir", "", "where the campaign directory is made (default $TMPDIR)")
	sidecars := fs.Int("sidecars", 2, "sidecars the dispatcher chooses from")
	datasets := fs.Int("datasets", 3, "datasets the mutations spread over")
	rows := fs.Int64("rows", 0, "rows of each generated dataset (default 20000; 5000 with --engine lance)")
	deadline := fs.Duration("deadline", 0, "execute deadline of every job (must fund the kill budget "+campaign.KillBudget.String()+"; default 8s, 20s with --engine lance)")
	kinds := fs.String("kinds", "", "comma-separated fault kinds to draw from (default all: "+strings.Join(campaign.Kinds(), ",")+
		"; with --engine lance: "+strings.Join(campaign.LanceKinds(), ",")+"; with --failover: "+strings.Join(campaign.FailoverKinds(), ",")+")")
	engine := fs.String("engine", campaign.EngineBuiltin, "engine of every mutation: builtin, or lance (the Lance engine from "+envLancePython+
		"/"+envLanceDir+" or .tools/lance and engines/lance, registered in every sidecar; the checker reads Lance's version chain)")
	failover := fs.Bool("failover", false, "the failover campaign: host processes on a shared etcd journal, killed and stopped")
	hosts := fs.Int("hosts", 3, "with --failover: host processes, each with its own sidecar")
	etcdBin := fs.String("etcd-bin", ".tools/etcd", "with --failover: etcd executable (scripts/etcd.sh install builds it)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "steward campaign: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(stderr, "steward campaign: cannot find this executable:", err)
		return 1
	}
	cfg := campaign.Config{
		Steward: self, MinIOBinary: *minioBin, WorkDir: *workDir, Keep: *keep, Mutations: *mutations,
		Seed: *seed, Datasets: *datasets, Rows: *rows, Sidecars: *sidecars, ExecuteDeadline: *deadline,
		Progress: progressPrinter(stderr),
	}
	if *kinds != "" {
		cfg.Kinds = strings.Split(*kinds, ",")
	}
	if cfg.Engine = *engine; cfg.Engine == campaign.EngineLance {
		if cfg.Lance.Python, cfg.Lance.Dir, err = lanceTools(); err != nil {
			fmt.Fprintln(stderr, "steward campaign:", err)
			return 2
		}
	}
	run := campaign.Run
	if *failover {
		cfg.Hosts, cfg.EtcdBinary, run = *hosts, *etcdBin, campaign.RunFailover
		fmt.Fprintf(stderr, "steward campaign --failover: %d mutations, seed %d, %d hosts, MinIO %s, etcd %s\n", *mutations, *seed, *hosts, *minioBin, *etcdBin)
	} else {
		fmt.Fprintf(stderr, "steward campaign: engine %s, %d mutations, seed %d, %d sidecars, MinIO %s\n", *engine, *mutations, *seed, *sidecars, *minioBin)
	}
	rep, err := run(ctx, cfg)
	if rep.Jobs > 0 || len(rep.Violations) > 0 {
		werr := rep.WriteTable(stdout)
		if werr == nil && *jobLines {
			werr = rep.WriteJobs(stdout)
		}
		if werr != nil {
			fmt.Fprintln(stderr, "steward campaign:", werr)
		}
	}
	switch {
	case errors.Is(err, campaign.ErrConfig):
		fmt.Fprintln(stderr, "steward campaign:", err)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "steward campaign:", err)
		return 1
	case !rep.OK():
		return 1
	}
	return 0
}

// runCampaignNode is one host process of a failover campaign, started by the campaign with its
// NodeConfig in the environment; it logs JSON to stderr and speaks the campaign's line protocol on
// stdin and stdout.
func runCampaignNode(ctx context.Context, stdout, stderr io.Writer) int {
	cfg, err := campaign.NodeConfigFromEnv()
	if err != nil {
		fmt.Fprintln(stderr, "steward campaign node:", err)
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: cfg.Name, Level: hclog.Info, Output: stderr, JSONFormat: true})
	if err := campaign.RunNode(ctx, cfg, os.Stdin, stdout, log); err != nil {
		log.Error("host process failed", "error", err)
		return 1
	}
	return 0
}

// progressPrinter redraws one status line on a terminal, and prints one line per phase change
// and every 10% of submissions elsewhere.
func progressPrinter(w io.Writer) func(campaign.Progress) {
	tty := isTerminal(w)
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
