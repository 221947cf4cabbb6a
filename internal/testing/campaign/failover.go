package campaign

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/hashicorp/go-hclog"
)

// Failover fault kinds, injected by the campaign around a job's first send (seen as the SEND line
// of the host process that journaled it).
const (
	// KindHostKill SIGKILLs the host process that sent the job (its sidecar gets PDEATHSIG and
	// kills its workers), after a random delay, and starts a successor under the same node name
	// (it waits for the dead claim's lease) with a sidecar on the same state directory.
	KindHostKill = "host_kill"
	// KindHostStop SIGSTOPs the host process that sent the job, after a random delay, for 1-10s
	// (often past its lease, sometimes past the job's deadline), then SIGCONTs it. Its sidecar
	// keeps running: the worker may commit while other nodes resolve (and fence) the job.
	KindHostStop = "host_stop"
	// KindEtcdKill SIGKILLs one member of the 3-member etcd cluster (the quorum stays), after a
	// random delay, and restarts it on its data directory after 1-4s.
	KindEtcdKill = "etcd_kill"
)

// FailoverKinds lists the failover campaign's fault kinds, KindClean first: the worker faults,
// the deadline kinds and MinIO outages of the single-host campaign, and the host and etcd kills.
// A sidecar kill (KindSidecarKill) is the single-host campaign's: here sidecars die with their
// hosts.
func FailoverKinds() []string {
	out := slices.DeleteFunc(Kinds(), func(k string) bool { return k == KindSidecarKill })
	return append(out, KindHostKill, KindHostStop, KindEtcdKill)
}

// SegmentFailoverKinds lists the fault kinds of a failover campaign of segmented builds
// (Config.Segments), KindClean first: host and etcd kills, host stops and MinIO outages, each
// timed from the first send of one step of the job (its TRAIN, its first SEGMENT or its
// COMMIT_SEGMENTS, drawn per job). The step faults of the engine (OOM, crashes) are the
// single-host segment campaign's.
func SegmentFailoverKinds() []string {
	return []string{KindClean, KindHostKill, KindHostStop, KindEtcdKill, KindMinIOOutage}
}

// failoverKinds are a failover campaign's kinds: SegmentFailoverKinds for segmented builds,
// FailoverKinds otherwise.
func failoverKinds(segments bool) []string {
	if segments {
		return SegmentFailoverKinds()
	}
	return FailoverKinds()
}

// failover is the state of a failover campaign: the etcd cluster and the host processes.
type failover struct {
	etcd    *testetcd.Cluster
	admin   *dispatch.EtcdStore
	prefix  string
	wrapper string
	hosts   []*hostProc
	etcdMu  sync.Mutex // one member down at a time: the quorum stays

	mu        sync.Mutex
	sends     map[string]int  // invocation → SEND lines seen (host side, before the wire)
	triggered map[string]bool // job → its first send was seen
	// senders are, per segmented job, the host processes ("node#incarnation") that sent its steps.
	senders map[string]map[string]bool
}

// RunFailover runs a failover campaign: Hosts host processes (Config.Node, each a
// dispatcher on one shared journal in a 3-member etcd cluster, each with its own real sidecar),
// all on one MinIO, driving the seeded plan while it SIGKILLs and SIGSTOPs host processes and
// kills etcd members. It checks what Run checks, and besides that every invocation reached a
// worker at most once across the cluster, counted from the sidecars' own log lines.
func RunFailover(ctx context.Context, cfg Config) (rep Report, err error) {
	if runtime.GOOS != "linux" {
		return rep, fmt.Errorf("%w: %s (needs Linux cgroups and /proc)", ErrUnsupported, runtime.GOOS)
	}
	if cfg.Node == "" {
		return rep, fmt.Errorf("%w: Node (the executable of the host processes) is required", ErrConfig)
	}
	if cfg.Engine != "" && cfg.Engine != EngineBuiltin && !cfg.Segments {
		return rep, fmt.Errorf("%w: the failover campaign runs on the built-in engine, or segmented Lance builds (engine %q)", ErrConfig, cfg.Engine)
	}
	cfg.failover = true
	if cfg.Hosts == 0 {
		cfg.Hosts = 3
	}
	cfg.Sidecars = cfg.Hosts
	if cfg, err = cfg.withDefaults(); err != nil {
		return rep, err
	}
	r := &run{cfg: cfg, ctx: ctx, rep: newReport(cfg, failoverKinds(cfg.Segments)), plan: map[string]planned{}, setupVersions: map[string]int64{},
		stepHit: map[string]bool{}, fo: &failover{sends: map[string]int{}, triggered: map[string]bool{}, senders: map[string]map[string]bool{}}}
	r.rep.Hosts = cfg.Hosts
	return r.execute(ctx, r.setupFailover)
}

// setupFailover makes what setup makes for a single host, with the etcd cluster, the shared
// journal and the host processes in place of the bbolt store and the in-process dispatcher (the
// campaign's own dispatcher only admits and lists: its store holds no claim, so it never sends).
func (r *run) setupFailover(ctx context.Context) error {
	if err := r.setupCommon(ctx); err != nil {
		return err
	}
	fo := r.fo
	var err error
	bin := r.cfg.EtcdBinary
	if bin == "" {
		if bin, err = testetcd.Binary(); err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	if fo.etcd, err = testetcd.NewFrom(bin, filepath.Join(r.dir, "etcd"), 3); err != nil {
		return fmt.Errorf("%w: etcd: %w", ErrSetup, err)
	}
	fo.prefix = "/steward-campaign/" + r.prefix
	r.rep.EtcdEndpoints, r.rep.EtcdPrefix = strings.Join(fo.etcd.Endpoints, ","), fo.prefix
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	fo.admin, err = dispatch.OpenEtcd(octx, dispatch.EtcdOptions{Endpoints: fo.etcd.Endpoints, Prefix: fo.prefix, OpTimeout: 5 * time.Second})
	cancel()
	if err != nil {
		return fmt.Errorf("%w: journal: %w", ErrSetup, err)
	}
	r.jobs = fo.admin
	if r.d, err = dispatch.New(r.dispatchConfig(fo.admin)); err != nil {
		return fmt.Errorf("%w: dispatcher: %w", ErrSetup, err)
	}
	if r.cfg.Engine == EngineLance {
		if err := os.MkdirAll(r.sidecarTemp(), 0o711); err != nil { // searchable by the workers' guest uid
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
	}
	if fo.wrapper, err = writeWrapper(r.dir); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	if err := os.MkdirAll(filepath.Join(r.dir, "logs"), 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	r.progress(Progress{Phase: "setup", Detail: fmt.Sprintf("journal on etcd %s, prefix %s", r.rep.EtcdEndpoints, fo.prefix)})
	for i := range r.cfg.Hosts {
		h := &hostProc{name: fmt.Sprintf("node-%d", i), r: r}
		fo.hosts = append(fo.hosts, h)
	}
	errs := make([]error, len(fo.hosts))
	var wg sync.WaitGroup
	for i, h := range fo.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.start(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: host: %w", ErrSetup, err)
	}
	return nil
}

// waitSent waits until no job is PENDING: every job has been sent (or settled), so every fault
// that a send schedules has been scheduled before the campaign waits for the faults to end. A
// segmented job's fault step may come after a pause with nothing PENDING (its commit follows its
// last segment's answer): there it waits until every job's fault step was sent or the job settled.
func (r *run) waitSent(ctx context.Context) error {
	deadline := time.Now().Add(r.cfg.ConvergeTimeout)
	for time.Now().Before(deadline) {
		jobs, err := r.d.List(dispatch.ListOptions{Active: true})
		if err == nil && !slices.ContainsFunc(jobs, r.unsent) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	what := "jobs still PENDING"
	if r.cfg.Segments {
		what = "segmented jobs unsettled with their fault step unsent"
	}
	r.violate("converge", "", fmt.Sprintf("%s %s after the last submission", what, r.cfg.ConvergeTimeout))
	return nil
}

// unsent reports whether j, an active job, may still send what schedules a fault.
func (r *run) unsent(j dispatch.Job) bool {
	if !r.cfg.Segments {
		return j.State == dispatch.StatePending
	}
	if j.Segmented == nil || j.State.Settled() {
		return false
	}
	r.fo.mu.Lock()
	defer r.fo.mu.Unlock()
	return !r.fo.triggered[j.ID]
}

// onHostSend counts a SEND line of host h and, at a job's first send (a segmented job's: of its
// fault step, timedBy), injects its fault.
func (r *run) onHostSend(h *hostProc, inc *incarnation, inv, job string) {
	fo := r.fo
	pl, ok := r.timedBy(job)
	fo.mu.Lock()
	fo.sends[inv]++
	if parent, _ := stepOf(job); r.cfg.Segments && parent != "" {
		if fo.senders[parent] == nil {
			fo.senders[parent] = map[string]bool{}
		}
		fo.senders[parent][fmt.Sprintf("%s#%d", h.name, inc.n)] = true
	}
	first := ok && !fo.triggered[pl.id()]
	if ok {
		fo.triggered[pl.id()] = true
	}
	fo.mu.Unlock()
	if !first {
		return
	}
	after := func(fn func()) {
		r.faults.Add(1)
		go func() {
			defer r.faults.Done()
			time.Sleep(pl.delay)
			fn()
		}()
	}
	switch pl.kind {
	case KindHostKill:
		after(func() {
			delivered, busy := h.kill(r.ctx)
			r.inject(pl.kind, delivered, busy)
		})
	case KindHostStop:
		after(func() {
			delivered, busy := h.pause(pl.outage)
			r.inject(pl.kind, delivered, busy)
		})
	case KindEtcdKill:
		after(func() { r.inject(pl.kind, r.killMember(pl.member, pl.outage), false) })
	case KindMinIOOutage:
		after(func() { r.inject(pl.kind, r.outage(pl.outage), false) })
	default:
		r.inject(pl.kind, true, false)
	}
}

// timedBy is the planned job whose fault a send of job (the id a SEND line names) times: the job
// itself, or for a step of a segmented job its parent when the step is the parent's fault step
// (planned.timesFault).
func (r *run) timedBy(job string) (planned, bool) {
	if !r.cfg.Segments {
		pl, ok := r.plan[job]
		return pl, ok
	}
	parent, op := stepOf(job)
	pl, ok := r.plan[parent]
	return pl, ok && pl.timesFault(op, job)
}

// killMember SIGKILLs etcd member i and starts it again after d. A kill while another member is
// down is not delivered: two down would be no quorum, which is an outage, not a failover.
func (r *run) killMember(i int, d time.Duration) bool {
	fo := r.fo
	if !fo.etcdMu.TryLock() {
		return false
	}
	defer fo.etcdMu.Unlock()
	m := fo.etcd.Members[i%len(fo.etcd.Members)]
	r.log.Info("etcd member killed", "member", m.Name, "for", d)
	m.Kill()
	time.Sleep(d)
	if err := retry(context.Background(), time.Minute, m.Start); err != nil {
		r.violate("etcd-restart", "", fmt.Sprintf("%s: %v", m.Name, err))
	}
	r.log.Info("etcd member started again", "member", m.Name)
	return true
}

// busyOn reports whether host node has a job RUNNING in the journal.
func (r *run) busyOn(node string) bool {
	jobs, err := r.d.List(dispatch.ListOptions{State: dispatch.StateRunning})
	return err == nil && slices.ContainsFunc(jobs, func(j dispatch.Job) bool { return j.Node == node })
}

// checkJournaledSends checks the journal's side of at-most-once: every job journaled at most one
// send (one dispatch event), and the host-side SEND lines count at most one per invocation.
func (r *run) checkJournaledSends() {
	jobs, err := r.d.List(dispatch.ListOptions{})
	if err != nil {
		r.violate("check", "", "list jobs: "+err.Error())
		return
	}
	for _, j := range jobs {
		n := 0
		for _, h := range j.History {
			if h.Event == dispatch.EventDispatch {
				n++
			}
		}
		if n > 1 {
			r.violate("journaled-twice", j.ID, fmt.Sprintf("%d dispatch events", n))
		}
	}
	r.fo.mu.Lock()
	defer r.fo.mu.Unlock()
	for job, by := range r.fo.senders {
		if len(by) > 1 {
			r.rep.Continued++
			r.log.Info("segmented job continued by another host process", "job", job, "senders", slices.Sorted(maps.Keys(by)))
		}
	}
	for inv, n := range r.fo.sends {
		r.rep.Sent++
		r.rep.MaxSends = max(r.rep.MaxSends, n)
		if n > 1 {
			r.violate("sent-twice", "", fmt.Sprintf("invocation %s: %d SEND lines across the hosts", inv, n))
		}
	}
}

// stopFailover stops the host processes gracefully (each closes its dispatcher, its sidecar and
// its claim), counts the workers their sidecars assigned, and stops the etcd cluster.
func (r *run) stopFailover() {
	fo := r.fo
	var wg sync.WaitGroup
	for _, h := range fo.hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.stop()
		}()
	}
	wg.Wait()
	if len(fo.hosts) > 0 {
		r.countAssignments()
	}
	if fo.admin != nil {
		fo.admin.Close()
		r.jobs = nil
	}
	if fo.etcd != nil {
		fo.etcd.Stop()
	}
}

// nodeLogger is the host processes' logger: JSON lines on stderr, which the campaign keeps per
// host incarnation.
func nodeLogger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: os.Stderr, JSONFormat: true})
}
