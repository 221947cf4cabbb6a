package campaign

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
)

// Segment fault kinds (Config.Segments): each acts on one step of a segmented job
// (host/dispatch/segmented.go), injected on the wire by the campaign's sidecar wrapper when that
// step is sent: a lowered memory limit (a real OOM kill) or an engine test fault
// (engines/lance/segments.py) in its params, or a sidecar SIGKILL or MinIO outage scheduled from
// its send. A SEGMENT kind hits a build of the job's first run; each kind hits one send of the
// job, so a rebuild or a retry after it runs clean (a fault whose step was refused before it ran
// is re-armed for the next attempt: stepAnswered).
const (
	KindTrainOOM      = "train_oom"            // TRAIN OOM-killed: the job fails, NOT_COMMITTED
	KindTrainCrash    = "train_crash"          // TRAIN dies after writing its training (crash_after_build)
	KindSegmentOOM    = "segment_oom"          // a SEGMENT OOM-killed: rebuilt
	KindSegmentBefore = "segment_crash_before" // a SEGMENT dies before Lance writes it (crash_before_commit)
	KindSegmentAfter  = "segment_crash_after"  // dies after Lance wrote it, before its record (crash_after_build)
	KindSegmentAnswer = "segment_crash_answer" // dies after its record, before its answer (crash_after_commit)
	KindCommitOOM     = "commit_oom"           // COMMIT_SEGMENTS OOM-killed before or while committing
	KindCommitBefore  = "commit_crash_before"  // COMMIT_SEGMENTS dies right before the manifest (crash_before_commit)
	KindCommitAfter   = "commit_crash_after"   // COMMIT_SEGMENTS dies right after it (crash_after_commit)
)

// segmentStepFault is the step each segment kind acts on, and how.
var segmentStepFault = map[string]struct {
	op, fault string // fault "" = the OOM limit
}{
	KindTrainOOM:      {rpc.OpTrain, ""},
	KindTrainCrash:    {rpc.OpTrain, KindCrashAfterBuild},
	KindSegmentOOM:    {rpc.OpSegment, ""},
	KindSegmentBefore: {rpc.OpSegment, KindCrashBeforeCommit},
	KindSegmentAfter:  {rpc.OpSegment, KindCrashAfterBuild},
	KindSegmentAnswer: {rpc.OpSegment, KindCrashAfterCommit},
	KindCommitOOM:     {rpc.OpCommitSegments, ""},
	KindCommitBefore:  {rpc.OpCommitSegments, KindCrashBeforeCommit},
	KindCommitAfter:   {rpc.OpCommitSegments, KindCrashAfterCommit},
}

// SegmentKinds lists the fault kinds of a segment campaign, KindClean first: the step faults
// above, and a sidecar SIGKILL or MinIO outage timed from the send of one of the job's steps
// (its TRAIN, a SEGMENT or its COMMIT_SEGMENTS, drawn per job).
func SegmentKinds() []string {
	return []string{KindClean, KindTrainOOM, KindTrainCrash, KindSegmentOOM, KindSegmentBefore, KindSegmentAfter,
		KindSegmentAnswer, KindCommitOOM, KindCommitBefore, KindCommitAfter, KindSidecarKill, KindMinIOOutage}
}

// segmentColumns are the columns segmented jobs index: a scalar index Lance names the segments
// of itself (BTREE) and a vector index trained once first (IVF_PQ: a TRAIN step).
var segmentColumns = []column{lanceColumns[0], lanceColumns[4]}

// vectorColumn is segmentColumns' IVF_PQ column, which the TRAIN kinds need.
const vectorColumn = 1

// segmentFragments is the number of fragments of a segment campaign's datasets: enough for 2 or
// 3 segments of one to two fragments each.
const segmentFragments = 4

// makeSegmentPlan draws n segmented jobs from seed: each of kinds once first (shuffled), then by
// draw; per job a dataset, a column (IVF_PQ for the TRAIN kinds), 2 or 3 segments, and for the
// kill, stop and outage kinds (sidecar, host, etcd, MinIO) the step whose send times them, the
// delay and how long the outage lasts.
func makeSegmentPlan(seed int64, n, datasets int, kinds []string) []planned {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5e9))
	first := slices.Clone(kinds)
	r.Shuffle(len(first), func(i, j int) { first[i], first[j] = first[j], first[i] })
	out := make([]planned, n)
	for i := range out {
		p := planned{seq: i, dataset: r.IntN(datasets), column: r.IntN(len(segmentColumns)), op: rpc.OpCreate, coin: r.IntN(2)}
		p.kind = draw(r, kinds)
		if i < len(first) {
			p.kind = first[i]
		}
		if f, ok := segmentStepFault[p.kind]; ok && f.op == rpc.OpTrain {
			p.column = vectorColumn
		}
		p.step = []string{rpc.OpTrain, rpc.OpSegment, rpc.OpCommitSegments}[r.IntN(3)]
		switch p.kind {
		case KindSidecarKill:
			p.delay = time.Duration(r.IntN(3000)) * time.Millisecond
		case KindMinIOOutage:
			p.delay = time.Duration(r.IntN(2000)) * time.Millisecond
			p.outage = time.Second + time.Duration(r.IntN(3000))*time.Millisecond
		case KindHostKill: // the failover kinds (SegmentFailoverKinds)
			p.delay = time.Duration(r.IntN(3000)) * time.Millisecond
		case KindHostStop:
			p.delay = time.Duration(r.IntN(2000)) * time.Millisecond
			p.outage = time.Second + time.Duration(r.IntN(9000))*time.Millisecond
		case KindEtcdKill:
			p.delay = time.Duration(r.IntN(2000)) * time.Millisecond
			p.outage = time.Second + time.Duration(r.IntN(3000))*time.Millisecond
			p.member = r.IntN(3)
		}
		out[i] = p
	}
	return out
}

// segmentIndexName is job p's index name: one per job, so that no job meets another's index and
// a NOT_COMMITTED job's name must appear in no version.
func segmentIndexName(p planned) string {
	return fmt.Sprintf("sg%04d_%s", p.seq, segmentColumns[p.column].name)
}

// submitSegmented admits p as a segmented job on a dataset no other job of the campaign builds on
// (its own first, else the next free one), pinned at its latest version: one build per dataset at
// a time, so that a commit fails only by a fault, not by another job taking its slot.
func (r *run) submitSegmented(ctx context.Context, p planned) error {
	for {
		busy, err := r.busyDatasets(ctx)
		if err != nil {
			return err
		}
		for k := range r.cfg.Datasets {
			ds := (p.dataset + k) % r.cfg.Datasets
			if busy[r.datasets[ds]] {
				continue
			}
			pinned, err := r.latest(ctx, ds)
			if err != nil {
				return err
			}
			col := segmentColumns[p.column]
			req := dispatch.SegmentedRequest{Segments: 2 + p.coin, Request: dispatch.Request{
				ID: p.id(), Dataset: r.ref(ds), AdmittedVersion: pinned, Op: rpc.OpCreate, Engine: r.format.engine(),
				Index:  rpc.IndexSpec{Name: segmentIndexName(p), Columns: []string{col.name}, Type: col.indexType(p.coin), Params: col.params},
				Schema: []rpc.FieldContract{{Name: col.name, Type: col.typ}},
			}}
			// index.plan needs a live sidecar and MinIO: a sidecar being replaced or an outage
			// is waited out.
			var final error
			attempt := 0
			err = retry(ctx, time.Minute, func() error {
				err := r.admitSegmented(ctx, req, p.seq+attempt)
				attempt++
				if attempt > 1 && errors.Is(err, dispatch.ErrJobExists) {
					return nil // a host admitted it and died (or stopped) before answering
				}
				if errors.Is(err, dispatch.ErrInvalidJob) || errors.Is(err, dispatch.ErrJobExists) {
					final = err // retrying changes nothing
					return nil
				}
				if err != nil {
					r.log.Info("segmented submit failed; retrying", "job", req.ID, "error", err)
				}
				return err
			})
			return errors.Join(err, final)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// admitSegmented submits req once: to the campaign's dispatcher, or on a failover campaign to
// host turn (round robin): the planning dispatcher names its own sidecars in the plan, and the
// campaign's admits without any. A retry asks the next host, so a host that died, stopped or
// failed before answering is not asked again in a row.
func (r *run) admitSegmented(ctx context.Context, req dispatch.SegmentedRequest, turn int) error {
	if r.fo == nil {
		_, err := r.d.SubmitSegmented(ctx, req)
		return err
	}
	return r.fo.hosts[turn%len(r.fo.hosts)].submitSegmented(ctx, req)
}

// busyDatasets are the datasets with a segmented job not settled yet.
func (r *run) busyDatasets(ctx context.Context) (map[string]bool, error) {
	var jobs []dispatch.Job
	err := retry(ctx, time.Minute, func() (err error) {
		jobs, err = r.d.List(dispatch.ListOptions{Active: true})
		return err
	})
	out := map[string]bool{}
	for _, j := range jobs {
		if j.Segmented != nil && !j.State.Settled() {
			out[j.Dataset.Path] = true
		}
	}
	return out, err
}

// parentOf is the segmented job a step's send belongs to (dispatch.StepID), or "".
func parentOf(p rpc.MutateParams) string {
	parent, _ := stepOf(p.JobID)
	return parent
}

// stepOf splits a step's job id (dispatch.StepID: "<parent>.train", "<parent>.seg<i>.a<n>",
// "<parent>.commit", a retry's ".a<n>" after the last two) into its parent and its step op: what
// a failover host's SEND line names. It returns "" for an id that is no step's.
func stepOf(id string) (parent, op string) {
	if i := strings.LastIndex(id, ".a"); i > 0 && digits(id[i+2:]) {
		if j := strings.LastIndex(id[:i], ".seg"); j > 0 && digits(id[j+4:i]) {
			return id[:j], rpc.OpSegment
		}
		id = id[:i]
	}
	for suffix, op := range map[string]string{".train": rpc.OpTrain, ".commit": rpc.OpCommitSegments} {
		if parent, ok := strings.CutSuffix(id, suffix); ok && parent != "" {
			return parent, op
		}
	}
	return "", ""
}

func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// faultStep is the step op whose send job p's fault acts on: its step fault's, else the drawn
// step; a TRAIN in a job without one (not IVF) becomes its first SEGMENT.
func (p planned) faultStep() string {
	want := p.step
	if f, ok := segmentStepFault[p.kind]; ok {
		want = f.op
	}
	if want == rpc.OpTrain && !strings.HasPrefix(segmentColumns[p.column].indexType(p.coin), "IVF") {
		return rpc.OpSegment
	}
	return want
}

// timesFault reports whether a send of step id (op) is one that job p's fault acts on: a send of
// its fault step, of the first segment (run 0) for a SEGMENT.
func (p planned) timesFault(op, id string) bool {
	return op == p.faultStep() && (op != rpc.OpSegment || strings.Contains(id, ".seg0.a"))
}

// onStepSend injects the fault of a step's parent job when this send is the step it acts on,
// once per job (a rebuild or a step of another kind is sent clean).
func (r *run) onStepSend(s *sidecar, p rpc.MutateParams) (rpc.MutateParams, string) {
	pl, ok := r.plan[parentOf(p)]
	if !ok || pl.kind == KindClean {
		return p, ""
	}
	if !pl.timesFault(p.Op, p.JobID) {
		return p, ""
	}
	r.mu.Lock()
	first := !r.stepHit[pl.id()]
	r.stepHit[pl.id()] = true
	r.mu.Unlock()
	if !first {
		return p, ""
	}
	r.log.Info("step fault", "job", pl.id(), "step", p.JobID, "kind", pl.kind)
	switch f, ok := segmentStepFault[pl.kind]; {
	case ok && f.fault == "":
		p.Limits = &rpc.WorkerLimits{MemoryBytes: lanceOOMLimit}
		return p, pl.kind
	case ok:
		p.Fault = f.fault
		return p, pl.kind
	case pl.kind == KindSidecarKill:
		r.scheduleKill(s, pl)
	case pl.kind == KindMinIOOutage:
		r.scheduleOutage(s, pl)
	}
	return p, ""
}

// stepAnswered counts a step fault the answer shows was acted out, or re-arms it for the job's
// next attempt of the step when the step never ran (refused at receive or before its worker:
// another job's outage or kill got there first), so that every such job meets its fault.
func (r *run) stepAnswered(p rpc.MutateParams, kind string, res rpc.MutateResult, err error) {
	var rpcErr *rpc.Error
	if errors.As(err, &rpcErr) || (err == nil && res.Phase == rpc.PhasePreInvocationRejected) {
		r.mu.Lock()
		delete(r.stepHit, parentOf(p))
		r.mu.Unlock()
		r.log.Info("step fault not acted out: re-armed", "step", p.JobID, "kind", kind)
		return
	}
	r.inject(kind, true, false)
}

// lanceIndexes is what segcheck.py prints: the latest version's fragments and every index with
// its segments, as Lance's describe_indices() gives them.
type lanceIndexes struct {
	Version   int64    `json:"version"`
	Fragments []uint64 `json:"fragments"`
	Indices   []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Segments []struct {
			UUID        string   `json:"uuid"`
			FragmentIDs []uint64 `json:"fragment_ids"`
		} `json:"segments"`
	} `json:"indices"`
}

//go:embed segcheck.py
var segcheckPy string

// checkSegmented checks every segmented job against Lance's own index metadata and the store:
//
//   - a COMMITTED job's index first appears at its admitted version + 1, and Lance describes it
//     as the segments its COMMIT_SEGMENTS listed, whose fragment bitmaps cover every fragment of
//     the dataset exactly once (segment-coverage);
//   - a NOT_COMMITTED job's index appears in no version (segment-published);
//   - the job's journaled segments done (its progress) is all of them when it is COMMITTED,
//     and never more than the plan's (segments-done);
//   - a TRAIN or SEGMENT step committed no version (step-committed);
//   - no object of any build is left under `_steward/builds/` (build-leftover); an unreferenced
//     `_indices/<uuid>/` object is an orphan of checkObjects like any other.
func (r *run) checkSegmented(ctx context.Context, jobs []dispatch.Job, chains map[string]*chain) {
	steps := map[string][]dispatch.Job{}
	for _, j := range jobs {
		if j.Parent != "" {
			steps[j.Parent] = append(steps[j.Parent], j)
			r.rep.Steps++
			if c := chains[j.Dataset.Path]; c != nil && j.Op != rpc.OpCommitSegments {
				if v, ok := c.commits[j.InvocationID]; ok {
					r.violate("step-committed", j.ID, fmt.Sprintf("%s step committed version %d", j.Op, v))
				}
			}
		}
	}
	described := map[string]*lanceIndexes{}
	for _, path := range r.datasets {
		var li lanceIndexes
		if err := r.lance().script(ctx, &li, segcheckPy, r.lance().uri(path)); err != nil {
			r.violate("segment-coverage", "", fmt.Sprintf("%s: describe_indices: %v", path, err))
			continue
		}
		described[path] = &li
		for o, err := range r.store.List(ctx, path+"/_steward/builds/") {
			if err != nil {
				r.violate("build-leftover", "", "list: "+err.Error())
				break
			}
			r.violate("build-leftover", "", fmt.Sprintf("%s (%d bytes) is left of a build", o.Key, o.Size))
		}
	}
	for _, j := range jobs {
		if j.Segmented == nil || chains[j.Dataset.Path] == nil || described[j.Dataset.Path] == nil {
			continue
		}
		r.checkSegmentedJob(j, steps[j.ID], chains[j.Dataset.Path], described[j.Dataset.Path])
	}
}

func (r *run) checkSegmentedJob(j dispatch.Job, steps []dispatch.Job, c *chain, li *lanceIndexes) {
	first := int64(0) // the first version with the job's index
	for _, v := range c.versions {
		if findIndex(&v, j.Index.Name) != nil {
			first = v.Version
			break
		}
	}
	if sp := j.Segmented; sp.Done > len(sp.Runs) || (j.State == dispatch.StateCommitted && sp.Done != len(sp.Runs)) {
		r.violate("segments-done", j.ID, fmt.Sprintf("%s with %d of %d segments done", j.State, sp.Done, len(sp.Runs)))
	}
	switch j.State {
	case dispatch.StateNotCommitted:
		if first != 0 {
			r.violate("segment-published", j.ID, fmt.Sprintf("NOT_COMMITTED, and %q is in version %d", j.Index.Name, first))
		}
		return
	case dispatch.StateCommitted:
	default:
		r.violate("unsettled", j.ID, fmt.Sprintf("state %s after convergence", j.State))
		return
	}
	if j.SlotHeld {
		r.violate("slot-held", j.ID, "COMMITTED and still holding its slot")
	}
	if first != j.AdmittedVersion+1 {
		r.violate("segment-coverage", j.ID, fmt.Sprintf("COMMITTED; %q first appears at version %d, not %d", j.Index.Name, first, j.AdmittedVersion+1))
	}
	var listed []string
	for _, s := range steps {
		if s.Op == rpc.OpCommitSegments && s.Segment != nil && s.State == dispatch.StateCommitted { // the commit that landed, of its attempts
			for _, ref := range s.Segment.Segments {
				listed = append(listed, ref.UUID)
			}
		}
	}
	var got []string
	seen := map[uint64]int{}
	for _, ix := range li.Indices {
		if ix.Name != j.Index.Name {
			continue
		}
		for _, s := range ix.Segments {
			got = append(got, s.UUID)
			for _, f := range s.FragmentIDs {
				seen[f]++
			}
		}
	}
	slices.Sort(listed)
	slices.Sort(got)
	if !slices.Equal(listed, got) {
		r.violate("segment-coverage", j.ID, fmt.Sprintf("Lance describes segments %v, the commit listed %v", got, listed))
	}
	for _, f := range li.Fragments {
		if seen[f] != 1 {
			r.violate("segment-coverage", j.ID, fmt.Sprintf("fragment %d is in %d segments of %q", f, seen[f], j.Index.Name))
		}
		delete(seen, f)
	}
	for f := range seen {
		r.violate("segment-coverage", j.ID, fmt.Sprintf("segment bitmap names fragment %d, which version %d lacks", f, li.Version))
	}
	r.mu.Lock()
	r.rep.SegmentsChecked += len(got)
	r.rep.IndexesChecked++
	r.mu.Unlock()
}

func (r *run) lance() *lanceFormat { return r.format.(*lanceFormat) }

// stepsLine counts a segmented job's steps by what became of them, for its job line.
func stepsLine(steps []dispatch.Job) string {
	n := map[string]int{}
	for _, s := range steps {
		n[s.Op+" "+string(s.State)]++
	}
	var parts []string
	for _, k := range slices.Sorted(mapKeys(n)) {
		parts = append(parts, fmt.Sprintf("%s×%d", k, n[k]))
	}
	return strings.Join(parts, ", ")
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
