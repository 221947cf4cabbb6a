package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cba1309c/steward/sidecar"
)

const ledgerUsage = `usage:
  steward ledger quarantine [--state-dir DIR | --ledger-path FILE] --by WHO --reason WHY

A sidecar refuses to start on a ledger slot whose journal (ledger-N.db, which also holds the
invocation records) is empty, truncated or damaged, and names the file: starting empty would
silently drop the custody the journal recorded. Restore the file from a backup if you can.
Otherwise quarantine is the audited way out: it moves each corrupt journal that no live sidecar
holds aside to <file>.corrupt-<UTC time>, with a <that>.audit.json record of
who, why and what was wrong, and the next sidecar starts that slot empty. The objects the lost
tickets named are orphans from then on: objects.sweep deletes them once they are old enough.
Sound slots are never moved. --state-dir defaults as for "steward serve".
`

// runLedger implements "steward ledger ...".
func runLedger(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "ledger", ledgerUsage, map[string]subcommand{"quarantine": ledgerQuarantine}, args, stdout, stderr)
}

func ledgerQuarantine(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ledger quarantine", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	stateDir := fs.String("state-dir", os.Getenv("STEWARD_STATE_DIR"), "the sidecar's state directory")
	ledgerPath := fs.String("ledger-path", "", "the journal a sidecar was pinned to with --ledger-path")
	by := fs.String("by", "", "who quarantines (recorded)")
	reason := fs.String("reason", "", "why (recorded)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	case *by == "" || *reason == "":
		return fmt.Errorf("%w: --by and --reason are required", errUsage)
	}
	moved, err := sidecar.QuarantineLedger(*stateDir, *ledgerPath, *by, *reason, time.Now())
	for _, m := range moved {
		problem := m.Problem
		if problem == "" {
			problem = "sound, moved with its slot"
		}
		fmt.Fprintf(stdout, "quarantined %s as %s (%s); audit record %s\n", m.From, m.To, problem, m.Note)
	}
	if len(moved) > 0 {
		fmt.Fprintln(stdout, "the custody these files recorded is lost: objects.sweep deletes the orphaned objects once they are old enough")
	}
	return err
}
