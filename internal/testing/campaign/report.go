package campaign

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a campaign did and what its checker found.
type Report struct {
	Seed      int64
	Mutations int
	Jobs      int // jobs found in the job store
	// Kinds has one row per fault kind, in Kinds() order.
	Kinds []*KindCounts
	// Versions is the number of manifests read; Commits how many versions COMMITTED jobs
	// committed (each checked against its job); Claims the commit-slot claims read (storage/slot)
	// and Fences how many of them, or of the manifests, are fences.
	Versions, Commits, Claims, Fences int
	// Objects in the run's prefix of the bucket, Referenced keys of all manifests, Owned objects
	// held by a ticket, Orphans objects neither referenced nor owned.
	Objects, Referenced, Owned, Orphans int
	// Segment campaigns only: Steps are the segmented jobs' step jobs; IndexesChecked the
	// COMMITTED jobs' indexes read back with Lance's describe_indices, SegmentsChecked their
	// segments.
	Steps, IndexesChecked, SegmentsChecked int
	// Remedied counts invocations re-resolved on the sidecar holding their tickets after their
	// job settled; each is also a "custody" Violation.
	Remedied int
	// Failover campaigns only: Hosts host processes; the shared journal's etcd endpoints and
	// prefix; Sent invocations seen leaving a host (SEND lines) and MaxSends the most SEND lines
	// of one invocation; Assigned invocations handed to a worker according to the sidecars' own
	// logs (SidecarLogs of them, one per sidecar incarnation) and MaxAssigned the most handovers
	// of one invocation. A passing campaign has both maxima ≤ 1.
	Hosts                     int
	EtcdEndpoints, EtcdPrefix string
	Sent, MaxSends            int
	Assigned, MaxAssigned     int
	SidecarLogs               int
	// Continued counts the segmented jobs (failover, Segments) whose steps more than one host
	// process sent: a successor under the same name, or another node, continued them.
	Continued int
	// LeftoverProcesses and LeftoverCgroups after teardown; LeftoverTemp worker temp dirs (or
	// other entries) left in the sidecars' TMPDIR (Lance campaigns), each a violation.
	LeftoverProcesses, LeftoverCgroups, LeftoverTemp int
	// Engine is the engine the mutations ran on; Segmented says they were segmented builds.
	Engine    string
	Segmented bool
	// Findings are product issues the campaign saw and worked around the way a host could.
	Findings []string
	// Violations are what the checker refuses. A passing campaign has none.
	Violations []Violation
	Durations  Durations
	// JobLines describe each job's path to its final state, one line each.
	JobLines []string
	// Dir is the campaign's directory when kept (Config.Keep); CgroupParent its cgroup parent.
	Dir, CgroupParent string
}

// KindCounts is one row of the outcome table.
type KindCounts struct {
	Kind string
	// Sent counts sends of the kind; Delivered those where the fault took place (a sidecar kill
	// whose sidecar was already replaced, or an outage during another, is not delivered); Busy
	// kills and outages that hit while the sidecar was running the job.
	Sent, Delivered, Busy int
	// Final job states.
	Committed, NotCommitted, Unknown, Open int
	// Resolved counts jobs settled by index.resolve (segmented: with a step settled so); Noop
	// IF-condition no-ops (COMMITTED).
	Resolved, Noop int
}

// row is the row of kind k, or an empty one.
func (r *Report) row(k string) KindCounts {
	for _, row := range r.Kinds {
		if row.Kind == k {
			return *row
		}
	}
	return KindCounts{Kind: k}
}

// Total is the number of jobs of the kind.
func (k *KindCounts) Total() int { return k.Committed + k.NotCommitted + k.Unknown + k.Open }

// Violation is one thing the checker refuses.
type Violation struct {
	Check  string // e.g. "orphan", "committed-not-in-chain", "leftover-process"
	Job    string // the job concerned, if any
	Detail string
}

func (v Violation) String() string {
	if v.Job == "" {
		return v.Check + ": " + v.Detail
	}
	return fmt.Sprintf("%s: job %s: %s", v.Check, v.Job, v.Detail)
}

// Durations of the campaign's phases.
type Durations struct {
	Setup, Drive, Converge, Check, Teardown, Total time.Duration
}

// OK reports whether the checker found nothing.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Faulted is the number of jobs with a fault injected (every kind but clean).
func (r *Report) Faulted() int {
	n := 0
	for _, k := range r.Kinds {
		if k.Kind != KindClean {
			n += k.Total()
		}
	}
	return n
}

// newReport has one row per kind of kinds, in that order.
func newReport(cfg Config, kinds []string) *Report {
	r := &Report{Seed: cfg.Seed, Mutations: cfg.Mutations, Engine: cfg.Engine, Segmented: cfg.Segments}
	for _, k := range kinds {
		r.Kinds = append(r.Kinds, &KindCounts{Kind: k})
	}
	return r
}

// kind returns the row of kind k (callers hold the run's lock).
func (r *Report) kind(k string) *KindCounts {
	for _, row := range r.Kinds {
		if row.Kind == k {
			return row
		}
	}
	row := &KindCounts{Kind: k}
	r.Kinds = append(r.Kinds, row)
	return row
}

// WriteTable prints the report for people: the outcome table, the storage and process figures,
// findings, violations and durations.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	what := "mutations"
	if r.Segmented {
		what = "segmented builds"
	}
	if r.Hosts > 0 {
		fmt.Fprintf(&b, "steward failover campaign — engine %s, seed %d, %d %s (%d faulted), %d host processes, 3 etcd members\n\n",
			r.Engine, r.Seed, r.Mutations, what, r.Faulted(), r.Hosts)
	} else {
		fmt.Fprintf(&b, "steward fault campaign — engine %s, seed %d, %d %s (%d faulted)\n\n", r.Engine, r.Seed, r.Mutations, what, r.Faulted())
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault kind\tjobs\tCOMMITTED\tNOT_COMMITTED\tUNKNOWN\topen\tvia resolve\tIF no-op\tdelivered\t")
	var total KindCounts
	for _, k := range r.Kinds {
		if k.Total() == 0 && k.Sent == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d/%d\t\n", k.Kind, k.Total(), k.Committed, k.NotCommitted,
			k.Unknown, k.Open, k.Resolved, k.Noop, k.Delivered, k.Sent)
		total.Committed += k.Committed
		total.NotCommitted += k.NotCommitted
		total.Unknown += k.Unknown
		total.Open += k.Open
		total.Resolved += k.Resolved
		total.Noop += k.Noop
		total.Delivered += k.Delivered
		total.Sent += k.Sent
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d/%d\t\n", total.Total(), total.Committed, total.NotCommitted,
		total.Unknown, total.Open, total.Resolved, total.Noop, total.Delivered, total.Sent)
	tw.Flush()
	fmt.Fprintf(&b, "\nstorage    %d manifests (%d committed by jobs), %d slot claims (%d fences), %d objects: %d referenced, %d owned by tickets, %d orphans\n",
		r.Versions, r.Commits, r.Claims, r.Fences, r.Objects, r.Objects-r.Owned-r.Orphans, r.Owned, r.Orphans)
	if r.Steps > 0 {
		fmt.Fprintf(&b, "segments   %d steps; %d COMMITTED indexes read back with Lance's describe_indices: %d segments, every fragment in exactly one\n",
			r.Steps, r.IndexesChecked, r.SegmentsChecked)
	}
	if r.Hosts > 0 {
		fmt.Fprintf(&b, "sends      %d invocations left a host, max %d SEND per invocation; %d reached a worker (%d sidecar logs), max %d per invocation\n",
			r.Sent, r.MaxSends, r.Assigned, r.SidecarLogs, r.MaxAssigned)
		if r.Segmented {
			fmt.Fprintf(&b, "continued  %d segmented jobs had steps sent by more than one host process\n", r.Continued)
		}
		fmt.Fprintf(&b, "kills      host SIGKILL %d (%d with a job RUNNING), host SIGSTOP %d (%d), etcd member SIGKILL %d, MinIO stop %d (delivered)\n",
			r.row(KindHostKill).Delivered, r.row(KindHostKill).Busy, r.row(KindHostStop).Delivered, r.row(KindHostStop).Busy,
			r.row(KindEtcdKill).Delivered, r.row(KindMinIOOutage).Delivered)
	}
	fmt.Fprintf(&b, "leftovers  %d processes, %d cgroups (parent %s)", r.LeftoverProcesses, r.LeftoverCgroups, r.CgroupParent)
	if r.Engine == EngineLance {
		fmt.Fprintf(&b, ", %d worker temp dirs", r.LeftoverTemp)
	}
	b.WriteString("\n")
	d := r.Durations
	fmt.Fprintf(&b, "durations  setup %s, drive %s, converge %s, check %s, teardown %s, total %s\n",
		round(d.Setup), round(d.Drive), round(d.Converge), round(d.Check), round(d.Teardown), round(d.Total))
	if r.Dir != "" {
		fmt.Fprintf(&b, "kept       %s\n", r.Dir)
	}
	if len(r.Findings) > 0 {
		fmt.Fprintf(&b, "\nfindings (%d): product issues worked around as a host could\n", len(r.Findings))
		for _, f := range r.Findings {
			fmt.Fprintf(&b, "  - %s\n", f)
		}
	}
	if len(r.Violations) == 0 {
		fmt.Fprintf(&b, "\nPASS: every outcome matches storage, nothing is left behind\n")
	} else {
		fmt.Fprintf(&b, "\nFAIL: %d violations\n", len(r.Violations))
		for _, v := range r.Violations {
			fmt.Fprintf(&b, "  - %s\n", v)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJobs prints one line per job: operation, pinned version, final state, first answer and
// resolution.
func (r *Report) WriteJobs(w io.Writer) error {
	_, err := io.WriteString(w, strings.Join(r.JobLines, "\n")+"\n")
	return err
}

func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
