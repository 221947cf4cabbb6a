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

	"github.com/cba1309c/steward/campaign"
)

// runCampaign runs a randomized fault campaign against real sidecars (this executable) and a
// MinIO it starts, prints the outcome table and the checker's verdict, and exits non-zero on any
// violation.
func runCampaign(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("campaign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mutations := fs.Int("mutations", 200, "randomized mutations to submit")
	seed := fs.Int64("seed", 1, "seed of every random choice (operations, faults, delays)")
	minioBin := fs.String("minio-bin", ".tools/minio", "MinIO executable (scripts/minio.sh install builds it)")
	keep := fs.Bool("keep", false, "keep the campaign directory (MinIO data, job store, ledgers, logs)")
	workDir := fs.String("workdir", "", "where the campaign directory is made (default $TMPDIR)")
	sidecars := fs.Int("sidecars", 2, "sidecars the dispatcher chooses from")
	datasets := fs.Int("datasets", 3, "datasets the mutations spread over")
	rows := fs.Int64("rows", 20000, "rows of each generated dataset")
	deadline := fs.Duration("deadline", 8*time.Second, "execute deadline of every job (must fund the kill budget "+campaign.KillBudget.String()+")")
	kinds := fs.String("kinds", "", "comma-separated fault kinds to draw from (default all: "+strings.Join(campaign.Kinds(), ",")+")")
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
	fmt.Fprintf(stderr, "steward campaign: %d mutations, seed %d, %d sidecars, MinIO %s\n", *mutations, *seed, *sidecars, *minioBin)
	rep, err := campaign.Run(ctx, cfg)
	if rep.Jobs > 0 || len(rep.Violations) > 0 {
		if werr := rep.WriteTable(stdout); werr != nil {
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
