package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
)

const jobsUsage = `usage:
  steward jobs list    --store FILE [--state STATE] [--active] [--limit N]
  steward jobs show    --store FILE JOB
  steward jobs release --store FILE --by WHO --reason WHY JOB

FILE is a host dispatcher's job store (bbolt). list and show open it read-only; release writes
an audited force-release of a stuck UNKNOWN job. A running dispatcher holds the file locked: stop
it, or release through its Go API (Dispatcher.Release).
`

// runJobs implements "steward jobs ...".
func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "jobs", jobsUsage, map[string]subcommand{
		"list": jobsList, "show": jobsShow, "release": jobsRelease,
	}, args, stdout, stderr)
}

// jobsFlags parses flags and positional arguments in any order.
type jobsFlags struct {
	fs    *flag.FlagSet
	store string
	args  []string
}

func newJobsFlags(name string) *jobsFlags {
	f := &jobsFlags{fs: flag.NewFlagSet("jobs "+name, flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.fs.StringVar(&f.store, "store", "", "the dispatcher's job store file")
	return f
}

func (f *jobsFlags) parse(args []string, positional int) error {
	for {
		if err := f.fs.Parse(args); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		if f.fs.NArg() == 0 {
			break
		}
		f.args = append(f.args, f.fs.Arg(0))
		args = f.fs.Args()[1:]
	}
	switch {
	case f.store == "":
		return fmt.Errorf("%w: --store is required", errUsage)
	case len(f.args) != positional:
		return fmt.Errorf("%w: want %d job id(s), got %d", errUsage, positional, len(f.args))
	}
	return nil
}

func (f *jobsFlags) open(readOnly bool) (*dispatch.BoltStore, error) {
	return dispatch.OpenBolt(f.store, dispatch.BoltOptions{ReadOnly: readOnly, LockTimeout: time.Second})
}

func jobsList(_ context.Context, args []string, stdout io.Writer) error {
	f := newJobsFlags("list")
	state := f.fs.String("state", "", "only jobs in this state (PENDING, RUNNING, COMMITTED, NOT_COMMITTED, UNKNOWN)")
	active := f.fs.Bool("active", false, "only jobs the dispatcher still acts on")
	limit := f.fs.Int("limit", 0, "only the newest N jobs")
	if err := f.parse(args, 0); err != nil {
		return err
	}
	st := dispatch.State(strings.ToUpper(*state))
	switch st {
	case "", dispatch.StatePending, dispatch.StateRunning, dispatch.StateCommitted, dispatch.StateNotCommitted, dispatch.StateUnknown:
	default:
		return fmt.Errorf("%w: unknown state %q", errUsage, *state)
	}
	s, err := f.open(true)
	if err != nil {
		return err
	}
	defer s.Close()
	jobs, err := dispatch.List(s, dispatch.ListOptions{State: st, Active: *active, Limit: *limit})
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tSLOT\tREFRESH\tOP\tINDEX\tDATASET\tVERSION\tSIDECAR\tUPDATED")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", j.ID, j.State, jobsSlot(j), j.Refresh, j.Op,
			j.Index.Name, j.Dataset.Path, j.AdmittedVersion, jobsDash(j.Sidecar), jobsStamp(j.Updated))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%d job(s)\n", len(jobs))
	return nil
}

func jobsShow(_ context.Context, args []string, stdout io.Writer) error {
	f := newJobsFlags("show")
	if err := f.parse(args, 1); err != nil {
		return err
	}
	s, err := f.open(true)
	if err != nil {
		return err
	}
	defer s.Close()
	j, err := dispatch.Get(s, f.args[0])
	if err != nil {
		return err
	}
	return printJob(stdout, j)
}

func jobsRelease(_ context.Context, args []string, stdout io.Writer) error {
	f := newJobsFlags("release")
	by := f.fs.String("by", "", "who releases the job (recorded in its history)")
	reason := f.fs.String("reason", "", "why (recorded in its history)")
	if err := f.parse(args, 1); err != nil {
		return err
	}
	if *by == "" || *reason == "" {
		return fmt.Errorf("%w: --by and --reason are required", errUsage)
	}
	s, err := f.open(false)
	if err != nil {
		return err
	}
	defer s.Close()
	j, err := dispatch.ForceRelease(s, f.args[0], *by, *reason, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "released job %s (%s) by %s\n", j.ID, j.State, *by)
	return nil
}

func printJob(w io.Writer, j dispatch.Job) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	kv := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	kv("job", j.ID)
	kv("state", j.State)
	kv("slot", jobsSlot(j))
	kv("refresh", j.Refresh)
	if j.RefreshError != "" {
		kv("refresh error", j.RefreshError)
	}
	kv("op", j.Op)
	kv("index", fmt.Sprintf("%s %s %s", j.Index.Name, jobsDash(j.Index.Type), jobsDash(strings.Join(j.Index.Columns, ","))))
	kv("dataset", j.Dataset.Store.URL+" "+j.Dataset.Path)
	kv("admitted version", j.AdmittedVersion)
	kv("invocation", jobsDash(j.InvocationID))
	kv("sidecar", jobsDash(j.Sidecar)+" epoch "+jobsDash(j.Epoch))
	kv("deadline", jobsStamp(j.Deadline))
	if r := j.Result; r != nil {
		res := fmt.Sprintf("%s code %d", jobsDash(r.Phase), r.Code)
		if r.Error != "" {
			res = fmt.Sprintf("error %d: %s", r.ErrorCode, r.Error)
		}
		kv("result", res)
		kv("versions", fmt.Sprintf("observed %d, committed %d", r.ObservedLatestVersion, r.CommittedVersion))
		if r.Message != "" {
			kv("message", r.Message)
		}
	}
	if r := j.Resolution; r != nil {
		kv("resolution", fmt.Sprintf("%s at slot %d (fenced %t) %s", r.Outcome, r.Version, r.Fenced, r.Reason))
	}
	kv("created", jobsStamp(j.Created))
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "AT\tEVENT\tFROM\tTO\tSLOT\tREFRESH\tBY\tDETAIL")
	for _, h := range j.History {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", jobsStamp(h.At), h.Event, jobsDash(string(h.From)), h.To,
			h.Slot, h.Refresh, jobsDash(h.By), h.Detail)
	}
	return tw.Flush()
}

func jobsSlot(j dispatch.Job) string {
	switch {
	case j.SlotHeld:
		return "held"
	case j.Released:
		return "force-released"
	}
	return "free"
}

func jobsDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func jobsStamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}
