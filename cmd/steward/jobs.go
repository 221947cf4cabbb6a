package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
)

const jobsUsage = `usage:
  steward jobs list       (--store FILE | --etcd ENDPOINTS [--etcd-prefix P]) [--state STATE] [--active] [--limit N]
  steward jobs show       (--store FILE | --etcd ENDPOINTS [--etcd-prefix P]) JOB
  steward jobs release    (--store FILE | --etcd ENDPOINTS [--etcd-prefix P]) --by WHO --reason WHY JOB
  steward jobs cancel     (--store FILE | --etcd ENDPOINTS [--etcd-prefix P]) [--by WHO] [--reason WHY] [--wait DURATION] JOB
  steward jobs quarantine --store FILE --by WHO --reason WHY

FILE is a host dispatcher's job store (bbolt). list and show read a consistent copy of it, taken
without a lock, so they work while a dispatcher runs. release writes an audited force-release of
a stuck UNKNOWN job; it needs the file's lock, which a running dispatcher holds: stop it, or
release through its Go API (Dispatcher.Release).

cancel journals a cancel of JOB (who and why are recorded). A job not yet sent is settled
NOT_COMMITTED at once and is never sent. A sent job keeps its state: the dispatcher that drives
its sidecar sends index.cancel (within a round, 1 s by default), and the job's answer settles it,
COMMITTED if its commit landed before the kill, else NOT_COMMITTED (docs/PROTOCOL.md §3.12).
--wait waits that long for the outcome. A finished job is left as it is. On FILE cancel needs
the lock, like release: stop the dispatcher (the next one honours the cancel), or cancel through
its Go API (Dispatcher.Cancel); on etcd every running dispatcher sees it at once.

ENDPOINTS are the comma-separated client URLs of the etcd cluster that holds a journal several
host dispatchers share (prefix default /steward/dispatch). list and show read it live, at one
revision; release commits one transaction that any running dispatcher sees at once.

A dispatcher refuses to open a store that is empty, truncated or damaged, naming the file.
quarantine is the audited way out: it moves the corrupt file aside to FILE.corrupt-<UTC time>,
with a FILE.corrupt-<UTC time>.audit.json record of who, why and what was wrong, and the next
dispatcher starts an empty store. The jobs it held are forgotten: settle UNKNOWN ones by hand.
A sound store is never moved.
`

// runJobs implements "steward jobs ...".
func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runGroup(ctx, "jobs", jobsUsage, map[string]subcommand{
		"list": jobsList, "show": jobsShow, "release": jobsRelease, "cancel": jobsCancel, "quarantine": jobsQuarantine,
	}, args, stdout, stderr)
}

// jobsFlags parses flags and positional arguments in any order.
type jobsFlags struct {
	fs         *flag.FlagSet
	store      string
	etcd       string // comma-separated endpoints
	etcdPrefix string
	args       []string
	// by and reason are set by audited.
	by, reason *string
}

func newJobsFlags(name string) *jobsFlags {
	f := &jobsFlags{fs: flag.NewFlagSet("jobs "+name, flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.fs.StringVar(&f.store, "store", "", "the dispatcher's job store file")
	if name != "quarantine" {
		f.fs.StringVar(&f.etcd, "etcd", "", "the etcd endpoints of a shared journal (comma-separated)")
		f.fs.StringVar(&f.etcdPrefix, "etcd-prefix", dispatch.DefaultEtcdPrefix, "the shared journal's key prefix")
	}
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
	case f.store != "" && f.etcd != "":
		return fmt.Errorf("%w: --store and --etcd exclude each other", errUsage)
	case f.store == "" && f.etcd == "" && f.fs.Lookup("etcd") != nil:
		return fmt.Errorf("%w: --store is required, or --etcd for a shared journal", errUsage)
	case f.store == "" && f.etcd == "":
		return fmt.Errorf("%w: --store is required", errUsage)
	case len(f.args) != positional:
		return fmt.Errorf("%w: want %d job id(s), got %d", errUsage, positional, len(f.args))
	case f.by != nil && (*f.by == "" || *f.reason == ""):
		return fmt.Errorf("%w: --by and --reason are required", errUsage)
	}
	return nil
}

// audited adds the required --by and --reason flags of a command that changes the store.
func (f *jobsFlags) audited(who string) *jobsFlags {
	f.by = f.fs.String("by", "", who+" (recorded)")
	f.reason = f.fs.String("reason", "", "why (recorded)")
	return f
}

// open reads a snapshot of the store, or opens it for writing, which needs its lock; a shared
// etcd journal is opened live, without a node claim (it can release, never send).
func (f *jobsFlags) open(ctx context.Context, write bool) (dispatch.Store, error) {
	if f.etcd != "" {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return dispatch.OpenEtcd(ctx, dispatch.EtcdOptions{Endpoints: strings.Split(f.etcd, ","), Prefix: f.etcdPrefix})
	}
	s, err := dispatch.OpenBolt(f.store, dispatch.BoltOptions{Snapshot: !write, LockTimeout: time.Second})
	switch {
	case errors.Is(err, dispatch.ErrStoreLocked):
		return nil, fmt.Errorf("%w: stop the dispatcher first, or go through its Go API (Dispatcher.Release, Dispatcher.Cancel)", err)
	case errors.Is(err, dispatch.ErrCorrupt):
		return nil, fmt.Errorf("%w; if it cannot be restored, move it aside: steward jobs quarantine --store %s --by WHO --reason WHY", err, f.store)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func jobsList(ctx context.Context, args []string, stdout io.Writer) error {
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
	s, err := f.open(ctx, false)
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

func jobsShow(ctx context.Context, args []string, stdout io.Writer) error {
	f := newJobsFlags("show")
	if err := f.parse(args, 1); err != nil {
		return err
	}
	s, err := f.open(ctx, false)
	if err != nil {
		return err
	}
	defer s.Close()
	j, err := dispatch.Get(s, f.args[0])
	if err != nil {
		return err
	}
	if err := printJob(stdout, j); err != nil || j.Segmented == nil {
		return err
	}
	steps, err := dispatch.Steps(s, j.ID)
	if err != nil {
		return err
	}
	return printSteps(stdout, steps)
}

// printSteps lists the steps of a segmented job: one invocation each.
func printSteps(w io.Writer, steps []dispatch.Job) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "STEP\tOP\tSTATE\tSIDECAR\tFRAGMENTS\tPEAK MiB\tWALL ms\tINDEX UUID")
	for _, st := range steps {
		peak, wall, id := "-", "-", "-"
		if r := st.Result; r != nil {
			if r.PeakMemoryBytes > 0 {
				peak = fmt.Sprintf("%.1f", float64(r.PeakMemoryBytes)/(1<<20))
			}
			if r.WallMs > 0 {
				wall = fmt.Sprint(r.WallMs)
			}
			id = jobsDash(r.IndexUUID)
		}
		frags := "-"
		if st.Segment != nil && len(st.Segment.FragmentIDs) > 0 {
			frags = fragmentRanges(st.Segment.FragmentIDs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", st.ID, st.Op, st.State, jobsDash(st.Sidecar), frags, peak, wall, id)
	}
	fmt.Fprintf(tw, "%d step(s)\n", len(steps))
	return tw.Flush()
}

// fragmentRanges writes ascending fragment ids as runs: 0-3,7,9-10.
func fragmentRanges(ids []uint64) string {
	var b strings.Builder
	for i := 0; i < len(ids); {
		j := i
		for j+1 < len(ids) && ids[j+1] == ids[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", ids[i], ids[j])
		} else {
			fmt.Fprintf(&b, "%d", ids[i])
		}
		i = j + 1
	}
	return b.String()
}

func jobsRelease(ctx context.Context, args []string, stdout io.Writer) error {
	f := newJobsFlags("release").audited("who releases the job")
	if err := f.parse(args, 1); err != nil {
		return err
	}
	s, err := f.open(ctx, true)
	if err != nil {
		return err
	}
	defer s.Close()
	j, err := dispatch.ForceRelease(s, f.args[0], *f.by, *f.reason, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "released job %s (%s) by %s\n", j.ID, j.State, *f.by)
	return nil
}

func jobsCancel(ctx context.Context, args []string, stdout io.Writer) error {
	f := newJobsFlags("cancel")
	by := f.fs.String("by", "cli", "who cancels the job (recorded)")
	reason := f.fs.String("reason", "", "why (recorded)")
	wait := f.fs.Duration("wait", 0, "wait this long for the job's outcome (0: do not wait)")
	if err := f.parse(args, 1); err != nil {
		return err
	}
	s, err := f.open(ctx, true)
	if err != nil {
		return err
	}
	err = cancelJob(ctx, s, f.args[0], *by, *reason, *wait, stdout)
	return errors.Join(err, s.Close())
}

// cancelJob journals a cancel of job id on s, says what it did, and with wait > 0 waits for the
// outcome.
func cancelJob(ctx context.Context, s dispatch.Store, id, by, reason string, wait time.Duration, stdout io.Writer) error {
	now := time.Now()
	j, err := dispatch.RequestCancel(s, id, by, reason, now)
	switch {
	case err != nil:
		return err
	case j.Cancel == nil:
		fmt.Fprintf(stdout, "job %s is %s: nothing to cancel\n", j.ID, j.State)
		return nil
	case !j.Cancel.At.Equal(now):
		fmt.Fprintf(stdout, "job %s is %s: a cancel by %s was journaled at %s already\n", j.ID, j.State, j.Cancel.By, jobsStamp(j.Cancel.At))
		if j.State.Settled() {
			return nil
		}
	case j.InvocationID == "":
		fmt.Fprintf(stdout, "cancelled job %s before any send: %s\n", j.ID, j.State)
		return nil
	default:
		fmt.Fprintf(stdout, "cancel of job %s journaled: invocation %s at sidecar %s is cancelled by the dispatcher driving it\n", j.ID, j.InvocationID, j.Sidecar)
	}
	if wait <= 0 {
		return nil
	}
	if j, err = jobsAwait(ctx, s, j.ID, wait); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "job %s: %s\n", j.ID, j.State)
	if r := j.Result; r != nil {
		fmt.Fprintf(stdout, "answer: %s code %d, committed version %d, cancelled %t: %s\n", jobsDash(r.Phase), r.Code, r.CommittedVersion, r.Cancelled, r.Message)
	}
	if c := j.Cancel; c != nil && c.Reply != nil {
		fmt.Fprintf(stdout, "cancel reply from %s: %s, outcome %s\n", c.Reply.Sidecar, c.Reply.State, jobsDash(c.Reply.Outcome))
	}
	return nil
}

// replyLag bounds the wait for a cancel's reply once the job is settled: the dispatcher journals
// it right after the answer, which the sidecar sent first.
const replyLag = 2 * time.Second

// jobsAwait waits up to d for job id to settle, and then briefly for its cancel's reply.
func jobsAwait(ctx context.Context, s dispatch.Store, id string, d time.Duration) (dispatch.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	changed, err := s.Watch(ctx, id)
	if err != nil {
		return dispatch.Job{}, err
	}
	var lag <-chan time.Time
	for {
		j, err := dispatch.Get(s, id)
		if err != nil {
			return j, err
		}
		if j.State.Settled() && (j.Cancel == nil || j.Cancel.Reply != nil) {
			return j, nil
		}
		if j.State.Settled() && lag == nil {
			lag = time.After(replyLag)
		}
		select {
		case <-changed:
		case <-lag:
			return j, nil
		case <-ctx.Done():
			if j.State.Settled() {
				return j, nil
			}
			return j, fmt.Errorf("job %s is still %s after %v: steward jobs show gives its outcome later", id, j.State, d)
		}
	}
}

func jobsQuarantine(_ context.Context, args []string, stdout io.Writer) error {
	f := newJobsFlags("quarantine").audited("who quarantines the store")
	if err := f.parse(args, 0); err != nil {
		return err
	}
	q, err := dispatch.QuarantineStore(f.store, *f.by, *f.reason, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "quarantined %s as %s (%s); audit record %s\n", q.From, q.To, q.Problem, q.Note)
	fmt.Fprintln(stdout, "the jobs it held are forgotten: the next dispatcher starts an empty store; settle UNKNOWN jobs by hand")
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
	if sp := j.Segmented; sp != nil {
		kv("segmented", fmt.Sprintf("build %s: %d segments over %d fragments, sidecars %s, committer %s, adopted from %s",
			sp.BuildID, len(sp.Runs), len(sp.Fragments), strings.Join(sp.Sidecars, ","), sp.Committer, jobsDash(strings.Join(sp.Adopted, ","))))
		kv("segments done", fmt.Sprintf("%d/%d", sp.Done, len(sp.Runs)))
		if len(sp.Gone) > 0 {
			kv("sidecars gone", fmt.Sprintf("%s (no node announces them; taken over from storage: %s)",
				strings.Join(sp.Gone, ","), jobsDash(strings.Join(sp.Stranded, ","))))
		}
		if sp.Failed != "" {
			kv("failing", sp.Failed)
		}
	}
	if j.Parent != "" {
		kv("step of", j.Parent)
		if j.Target != "" {
			kv("target sidecar", j.Target)
		}
		if j.Segment != nil && len(j.Segment.FragmentIDs) > 0 {
			kv("fragments", fragmentRanges(j.Segment.FragmentIDs))
		}
	}
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
	if c := j.Cancel; c != nil {
		kv("cancel", fmt.Sprintf("journaled %s by %s %s", jobsStamp(c.At), jobsDash(c.By), c.Reason))
		if r := c.Reply; r != nil {
			kv("cancel reply", fmt.Sprintf("%s from %s: %s, outcome %s", jobsStamp(r.At), r.Sidecar, r.State, jobsDash(r.Outcome)))
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
