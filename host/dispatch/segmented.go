package dispatch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// A segmented job (docs/PROTOCOL.md §9.1) is a parent job that holds the index name and is never
// sent, and one step job per invocation: TRAIN (vector types), SEGMENT per planned fragment run
// (a rebuild is a new step with a new invocation, hence a new uuid), COMMIT_SEGMENTS. Steps are
// ordinary jobs with deterministic ids, created in the parent's store transaction: they reuse the
// one-send journaling, the answer, deadline, unsent and resolve machinery unchanged, so a step
// sent and unanswered is resolved and never sent twice, and any node continues the job. Between
// the last SEGMENT and the commit the committing sidecar adopts the custody of the segments other
// sidecars built (objects.status → objects.reserve on the committer → objects.accept on the
// builder), journaled per builder in the plan.

// SegmentedPlan is the journaled plan and progress of a segmented job.
type SegmentedPlan struct {
	BuildID string `json:"build_id"`
	// Fragments are the pinned version's fragment ids; Runs the disjoint covering runs, one
	// segment each (index.plan).
	Fragments []uint64   `json:"fragments"`
	Runs      [][]uint64 `json:"runs"`
	// Train is set for vector index types: a TRAIN step precedes the segments.
	Train bool `json:"train,omitempty"`
	// Sidecars are the sidecar names the segments are spread over (round robin), Committer the
	// one that adopts them all and commits.
	Sidecars  []string `json:"sidecars"`
	Committer string   `json:"committer"`
	// Attempts counts the steps created per run (the rebuilds of run i are attempts > 1).
	Attempts []int `json:"attempts"`
	// TrainAttempts and CommitAttempts count the TRAIN and COMMIT_SEGMENTS steps created (0 in
	// a plan journaled before they were counted, whose one step is attempt 1).
	TrainAttempts  int `json:"train_attempts,omitempty"`
	CommitAttempts int `json:"commit_attempts,omitempty"`
	// Done counts the runs with a segment written (an answered SEGMENT_WRITTEN), of len(Runs):
	// it never decreases (a written segment is never rebuilt) and reaches len(Runs) before the
	// commit is sent.
	Done int `json:"done,omitempty"`
	// Adopted are the builder sidecars whose custody the committer has adopted.
	Adopted []string `json:"adopted,omitempty"`
	// Gone are plan sidecars that no node announced any more (a shared journal only): nothing is
	// sent to, adopted from or abandoned on them again, and a never-sent step aimed at one is
	// re-aimed at a live plan sidecar (gone.go). Stranded are the builders whose segments'
	// custody went with a gone sidecar (the gone ones, and those adopted into a gone committer):
	// the committer takes those segments over from storage, by prefix, instead of adopting them.
	Gone     []string `json:"gone,omitempty"`
	Stranded []string `json:"stranded,omitempty"`
	// Failed says why the job is being failed; once set no step is created, and the job ends
	// NOT_COMMITTED after every step settled and the build's custody was abandoned.
	Failed string `json:"failed,omitempty"`
}

// JobProgress is a segmented job's progress as Config.Progress reports it: Done of Total
// segments written. Done never decreases; the job's outcome follows Done == Total.
type JobProgress struct {
	Job         string
	Done, Total int
}

// MaxSegmentAttempts bounds the builds of one run (the first and its rebuilds), and the sends of
// a job's TRAIN and of its COMMIT_SEGMENTS.
const MaxSegmentAttempts = 3

// Step kinds, as step ids name them.
const (
	stepTrain  = "train"
	stepCommit = "commit"
)

// StepID is the id of a step of parent: "<parent>.train", "<parent>.seg<i>.a<n>", "<parent>.commit";
// a TRAIN's or COMMIT_SEGMENTS's attempt n > 1 is "<parent>.train.a<n>", "<parent>.commit.a<n>".
func StepID(parent, kind string, run, attempt int) string {
	switch {
	case kind == rpc.OpSegment:
		return fmt.Sprintf("%s.seg%d.a%d", parent, run, attempt)
	case attempt > 1:
		return fmt.Sprintf("%s.%s.a%d", parent, kind, attempt)
	}
	return parent + "." + kind
}

// SegmentedRequest is a segmented job to admit: Request with Op CREATE, and exactly one of
// Segments (K) and MaxRowsPerSegment, passed to index.plan. Request.Fault (test-only) is passed
// to the first build of each segment only, so that its rebuild runs.
type SegmentedRequest struct {
	Request
	Segments          int
	MaxRowsPerSegment int64
}

// caller is what a segmented job needs of a sidecar beyond Sidecar: index.plan and objects.*.
// *host.Client has it.
type caller interface {
	Call(ctx context.Context, method string, params, result any) error
}

// SubmitSegmented plans the job over its admitted version (index.plan on a live sidecar) and
// admits it as PENDING with its plan, or rejects it as Submit does (ErrNoSidecar when no sidecar
// can plan).
//
// The plan names sidecars by the names they were added under, and a step is only sent, adopted
// from or abandoned on a sidecar added under its name. On a shared journal a plan sidecar that no
// node announces any more is gone for the job and its work moves to live ones (gone.go); on one
// node the job waits until a sidecar is added again under that name.
func (d *Dispatcher) SubmitSegmented(ctx context.Context, r SegmentedRequest) (Job, error) {
	if !d.enabled.Load() {
		return Job{}, ErrDisabled
	}
	if r.Op != rpc.OpCreate {
		return Job{}, fmt.Errorf("%w: a segmented job builds an index (op %s), not %s", ErrInvalidJob, rpc.OpCreate, r.Op)
	}
	j, err := d.newJob(r.Request)
	if err != nil {
		return Job{}, err
	}
	if len(j.ID) > rpc.MaxBuildID-len(".seg1024.a3") { // its steps' ids are valid job ids too
		return Job{}, fmt.Errorf("%w: a segmented job id is at most %d characters", ErrInvalidJob, rpc.MaxBuildID-len(".seg1024.a3"))
	}
	e := d.pick(false)
	if e == nil {
		return Job{}, ErrNoSidecar
	}
	c, ok := e.sc.(caller)
	if !ok {
		return Job{}, fmt.Errorf("%w: sidecar %s cannot plan (no Call)", ErrNoSidecar, e.name)
	}
	pp := rpc.PlanParams{Dataset: r.Dataset, Version: r.AdmittedVersion, Segments: r.Segments, MaxRowsPerSegment: r.MaxRowsPerSegment}
	if err := pp.Validate(); err != nil {
		return Job{}, fmt.Errorf("%w: %w", ErrInvalidJob, err)
	}
	if d.cfg.Credentials != nil {
		if pp.Credentials, err = d.cfg.Credentials(ctx, r.Dataset); err != nil {
			return Job{}, err
		}
	}
	var plan rpc.PlanResult
	if err := c.Call(ctx, rpc.MethodIndexPlan, pp, &plan); err != nil {
		return Job{}, fmt.Errorf("index.plan on sidecar %s: %w", e.name, err)
	}
	sp := &SegmentedPlan{BuildID: j.ID, Runs: plan.Segments, Train: strings.HasPrefix(j.Index.Type, "IVF"),
		Attempts: make([]int, len(plan.Segments)), Sidecars: d.sidecarNames()}
	for _, f := range plan.Fragments {
		sp.Fragments = append(sp.Fragments, f.ID)
	}
	sp.Committer = sp.Sidecars[0]
	j.Segmented = sp
	if err := d.insert(&j); err != nil {
		return Job{}, err
	}
	d.log.Info("segmented job admitted", "job", j.ID, "index", j.Index.Name, "segments", len(sp.Runs), "sidecars", sp.Sidecars)
	d.kickRound()
	return j, nil
}

func (d *Dispatcher) sidecarNames() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n, e := range d.sidecars {
		if !exited(e.sc) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Steps returns the steps of segmented job id, in id order.
func Steps(s Store, id string) ([]Job, error) {
	var out []Job
	err := s.View(func(tx Tx) error {
		return tx.All(func(j Job) error {
			if j.Parent == id {
				out = append(out, j)
			}
			return nil
		})
	})
	return out, err
}

// driveSegmented advances every active segmented job by what its steps' states allow.
func (d *Dispatcher) driveSegmented(ctx context.Context, _ *RoundStats) error {
	jobs, err := d.active(func(j *Job) bool { return j.Segmented != nil })
	for _, j := range jobs {
		if err := d.advance(ctx, j); err != nil {
			return err
		}
	}
	return err
}

// stepState is what a step's record says for its parent.
type stepState int

const (
	stepBusy   stepState = iota // not settled yet (or settled with its slot's worker still to resolve)
	stepDone                    // answered OK (TRAINED, SEGMENT_WRITTEN, or COMMITTED)
	stepRetry                   // settled NOT_COMMITTED without running to a native answer: build again
	stepFailed                  // refused, failed natively, or UNKNOWN given up on: the job fails
)

func classifyStep(s Job) stepState {
	r := s.Result
	native := r != nil && r.ErrorClass == "" && r.Phase == rpc.PhaseNativeReturn
	switch {
	case s.State == StateCommitted && (s.Op == rpc.OpCommitSegments || (native && r.Code == rpc.NativeOK && r.IndexUUID != "")):
		return stepDone
	case s.State == StateUnknown && s.Released:
		return stepFailed
	case !s.State.Settled():
		return stepBusy
	case r == nil && s.Resolution == nil:
		return stepRetry // journaled and never sent: nothing ran
	case r == nil && s.Op == rpc.OpCommitSegments:
		// Sent and never answered (its sender died), settled NOT_COMMITTED by index.resolve:
		// as for an INDETERMINATE commit below, its segments went with it, and the resolve
		// fenced its slot. The failover campaign found this retried and refused (-32602).
		return stepFailed
	case r == nil:
		return stepRetry // a TRAIN or SEGMENT sent, never answered, settled: build again
	case r.OOMKilled && s.Op != rpc.OpSegment:
		// The same limit kills a TRAIN (its sample and models) or a COMMIT_SEGMENTS (its
		// manifest) again: only a SEGMENT, which the custody rules rebuild after any
		// failure, is built again at it.
		return stepFailed
	case r.OOMKilled:
		return stepRetry
	case r.ErrorClass == ErrorRefused && transientRefusal(rpc.Code(r.ErrorCode)),
		r.Phase == rpc.PhasePreInvocationRejected && transientRejection(r.Code):
		// Refused at receive, or before its worker ran, for now: nothing ran, and a commit's
		// segments are still (or again) the build's. A new step, after a round.
		return stepRetry
	case native && r.Code == rpc.NativeIO && s.Op != rpc.OpCommitSegments:
		// The store failed under a TRAIN or SEGMENT (an outage): its objects were deleted with
		// it, and the next attempt, after the backoff, may find the store back. A commit that
		// failed so took its segments with it (below).
		return stepRetry
	case r.ErrorClass == ErrorRefused || r.Phase == rpc.PhasePreInvocationRejected || (native && r.Code != rpc.NativeOK):
		return stepFailed // refused, or the engine failed: building again would fail again
	case s.Op == rpc.OpCommitSegments:
		// INDETERMINATE or no answer, settled NOT_COMMITTED: the commit had taken the segments
		// into its custody, which deleted them with it. Nothing is left to commit.
		return stepFailed
	}
	// INDETERMINATE or no answer, settled by index.resolve: the step left nothing the build
	// can use (a segment whose uuid no answer named is abandoned with the build). Build again.
	return stepRetry
}

// RetryBackoff is how long after a step refused for now (at receive, or before its worker ran)
// its next attempt is created: doubled per attempt (2 s, 4 s), so that the attempts span an
// outage of the store or a sidecar's restart instead of meeting it three times in a row.
const RetryBackoff = 2 * time.Second

// retryAt is when the next attempt of step s, attempt a, may be created: at once unless s was
// refused for now.
func retryAt(s Job, a int) time.Time {
	if r := s.Result; r != nil && (r.ErrorClass == ErrorRefused || r.Phase == rpc.PhasePreInvocationRejected ||
		(r.Phase == rpc.PhaseNativeReturn && r.ErrorClass == "" && r.Code == rpc.NativeIO)) {
		return s.Updated.Add(RetryBackoff << (max(a, 1) - 1))
	}
	return time.Time{}
}

// transientRejection: a PRE_INVOCATION_REJECTED reason that a later send may not get.
func transientRejection(c int) bool {
	switch c {
	case rpc.ReasonDeadlineLapsed, rpc.ReasonLaunchFailed, rpc.ReasonDatasetUnavailable, rpc.ReasonShuttingDown:
		return true
	}
	return false
}

// transientRefusal: a refusal at receive that a later send may not get (docs/PROTOCOL.md §7).
func transientRefusal(c rpc.Code) bool {
	switch c {
	case rpc.CodeOverloaded, rpc.CodeShuttingDown, rpc.CodeStorageUnavailable, rpc.CodeDeadlineUnfundable:
		return true
	}
	return false
}

// advance takes the next step of segmented job p, if any: create the steps due, adopt custody,
// settle the parent.
func (d *Dispatcher) advance(ctx context.Context, p Job) error {
	steps, err := Steps(d.store, p.ID)
	if err != nil {
		return err
	}
	byID := map[string]Job{}
	for _, s := range steps {
		byID[s.ID] = s
	}
	sp := p.Segmented
	if p.Cancel != nil && sp.Failed == "" {
		return d.cancelSteps(p, steps)
	}
	if moved, err := d.leaveGone(p, steps); err != nil || moved {
		return err // the plan or a step changed: the next round works from the new record
	}
	busy := false
	for _, s := range steps {
		busy = busy || classifyStep(s) == stepBusy
	}
	committed := slices.ContainsFunc(steps, func(s Job) bool { return s.Op == rpc.OpCommitSegments && classifyStep(s) == stepDone })
	if sp.Failed != "" && !committed {
		if busy || !d.drivesAll(sp.live()) {
			return nil // wait until no step can still write into the build; or another node's
		}
		if err := d.abandonBuild(ctx, p, writtenSegments(steps)); err != nil {
			d.log.Warn("cannot abandon the build's custody yet", "job", p.ID, "error", err)
			return nil
		}
		return d.settleParent(p.ID, StateNotCommitted, nil, "build abandoned: "+sp.Failed)
	}
	var want []Job // steps to create
	fail := ""
	trainUUID := ""
	now := d.cfg.Now()
	if sp.Train {
		a := attempts(sp.TrainAttempts, byID, StepID(p.ID, stepTrain, 0, 0))
		s, ok := byID[StepID(p.ID, stepTrain, 0, a)]
		switch st := classifyStep(s); {
		case a == 0:
			want = append(want, d.step(p, rpc.OpTrain, stepTrain, -1, 1, sp.Committer, nil, ""))
		case !ok:
			return nil // created by the transaction that counted it; another node's commit pending
		case st == stepDone && s.Result != nil:
			trainUUID = s.Result.IndexUUID
		case st == stepRetry && a < MaxSegmentAttempts && now.Before(retryAt(s, a)):
		case st == stepRetry && a < MaxSegmentAttempts:
			want = append(want, d.step(p, rpc.OpTrain, stepTrain, -1, a+1, sp.Committer, nil, ""))
		case st != stepBusy:
			fail = fmt.Sprintf("TRAIN %s (attempt %d) %s", s.ID, a, stepWhy(s))
		}
		if trainUUID == "" {
			return d.createSteps(p, want, fail)
		}
	}
	var refs []rpc.SegmentRef
	builders := map[string]bool{}
	for i, run := range sp.Runs {
		a := sp.Attempts[i]
		s, ok := byID[StepID(p.ID, rpc.OpSegment, i, a)]
		st := stepRetry
		if ok {
			st = classifyStep(s)
		}
		switch {
		case a > 0 && !ok:
			continue // created by the transaction that counted it; another node's commit pending
		case st == stepDone && s.Result != nil && s.Result.IndexUUID != "":
			refs = append(refs, rpc.SegmentRef{UUID: s.Result.IndexUUID, FragmentIDs: run})
			builders[s.Sidecar] = true
		case st == stepRetry && a >= MaxSegmentAttempts:
			fail = fmt.Sprintf("segment %d: %d attempts never answered (last: %s)", i, a, stepWhy(s))
		case st == stepRetry && ok && now.Before(retryAt(s, a)):
		case st == stepRetry:
			live := sp.live()
			target := live[(i+a)%len(live)]
			want = append(want, d.step(p, rpc.OpSegment, rpc.OpSegment, i, a+1, target, run, trainUUID))
		case st == stepFailed:
			fail = fmt.Sprintf("segment %d (%s) %s", i, s.ID, stepWhy(s))
		}
	}
	if sp.Done < len(refs) {
		if err := d.segmentsDone(p.ID, len(refs), len(sp.Runs)); err != nil {
			return err
		}
	}
	if fail != "" || len(want) > 0 || len(refs) < len(sp.Runs) {
		return d.createSteps(p, want, fail)
	}
	if !d.drivesAll(sp.live()) {
		return nil // the node that drives the plan's sidecars adopts and commits
	}
	// Every segment written: the committer adopts the others' custody, then commits. A builder
	// whose custody went with a gone sidecar is taken over from storage instead: the committer
	// reserves its segments' folders and the build's area as prefix tickets.
	for _, b := range slices.Sorted(mapKeys(builders)) {
		stranded := slices.Contains(sp.Stranded, b)
		if (b == sp.Committer && !stranded) || slices.Contains(sp.Adopted, b) {
			continue
		}
		how := "adopted"
		var err error
		if stranded {
			how = "took over from storage"
			err = d.takeOver(ctx, p, sp.Committer, builtBy(steps, b))
		} else {
			err = d.adopt(ctx, p.Dataset.Store, sp.BuildID, b, sp.Committer)
		}
		if err != nil {
			d.log.Warn("adoption not done yet", "job", p.ID, "from", b, "to", sp.Committer, "error", err)
			return nil
		}
		if _, _, err := d.modify(p.ID, func(x *Job) bool {
			if x.Segmented == nil || x.Segmented.Committer != sp.Committer || slices.Contains(x.Segmented.Adopted, b) {
				return false
			}
			x.Segmented.Adopted = append(x.Segmented.Adopted, b)
			x.record(d.cfg.Now(), EventAdopt, x.State, fmt.Sprintf("sidecar %s %s build %s's custody from %s", sp.Committer, how, sp.BuildID, b))
			return true
		}); err != nil {
			return err
		}
	}
	a := attempts(sp.CommitAttempts, byID, StepID(p.ID, stepCommit, 0, 0))
	c, ok := byID[StepID(p.ID, stepCommit, 0, a)]
	if ok && c.State == StatePending && c.Target != sp.Committer {
		// Created for a committer that is gone since: sent to the new one, which now holds
		// every segment (re-aimed only while never sent, in a transaction that rechecks it).
		_, _, err := d.retarget(c.ID, c.Target, sp.Committer)
		return err
	}
	newCommit := func() error {
		cs := d.step(p, rpc.OpCommitSegments, stepCommit, -1, a+1, sp.Committer, nil, "")
		cs.Segment.Segments = refs
		return d.createSteps(p, []Job{cs}, "")
	}
	switch st := classifyStep(c); {
	case a == 0, ok && st == stepRetry && a < MaxSegmentAttempts && !now.Before(retryAt(c, a)):
		return newCommit()
	case !ok, st == stepRetry && a < MaxSegmentAttempts:
		return nil // created by another node's transaction, not committed yet; or a retry's wait
	case st == stepDone:
		// The commit ended the build on its sidecar; what a step of a vanished node wrote after
		// its resolve, or a resolved commit left held, is ended here (a no-op otherwise). The job
		// settles only once that is done, as a failed one does: settled with a plan sidecar
		// restarting, it left the build's custody there for good (the segment campaign found a
		// COMMITTED build holding 3 tickets on a sidecar killed around its commit).
		if err := d.abandonBuild(ctx, p, nil); err != nil {
			d.log.Warn("committed; the build's leftover custody is ended first", "job", p.ID, "error", err)
			return nil
		}
		res := c.Result
		if res == nil || res.CommittedVersion == 0 {
			res = &Result{At: d.cfg.Now(), CommittedVersion: p.AdmittedVersion + 1, CompletionReason: rpc.CompletionCommitted}
		}
		return d.settleParent(p.ID, StateCommitted, res, "COMMIT_SEGMENTS "+c.ID+" committed")
	case st == stepRetry, st == stepFailed:
		_, _, err := d.modify(p.ID, func(x *Job) bool {
			if x.Segmented == nil || x.Segmented.Failed != "" {
				return false
			}
			x.Segmented.Failed = fmt.Sprintf("COMMIT_SEGMENTS %s (attempt %d) %s", c.ID, a, stepWhy(c))
			return true
		})
		return err
	}
	return nil
}

// segmentsDone journals that done of total segments of job id are written, when that is news,
// and reports it to Config.Progress.
func (d *Dispatcher) segmentsDone(id string, done, total int) error {
	_, changed, err := d.modify(id, func(x *Job) bool {
		if x.Segmented == nil || x.Segmented.Done >= done {
			return false
		}
		x.Segmented.Done = done
		return true
	})
	if changed && d.cfg.Progress != nil {
		d.cfg.Progress(JobProgress{Job: id, Done: done, Total: total})
	}
	return err
}

// attempts is how many steps of a TRAIN or COMMIT_SEGMENTS were created: counted, or 1 in a
// plan journaled before they were counted whose first step exists.
func attempts(counted int, byID map[string]Job, first string) int {
	if _, ok := byID[first]; ok && counted == 0 {
		return 1
	}
	return counted
}

// cancelSteps turns a journaled cancel of segmented job p into its failure, and journals a cancel
// of every step still unsettled (a PENDING one is then never sent; a sent one gets index.cancel
// from the node driving its sidecar). A commit that lands before its cancel still commits the job.
func (d *Dispatcher) cancelSteps(p Job, steps []Job) error {
	now := d.cfg.Now()
	for _, s := range steps {
		if !s.State.Settled() && s.State != StateUnknown {
			if _, err := RequestCancel(d.store, s.ID, p.Cancel.By, "segmented job "+p.ID+" cancelled", now); err != nil {
				return err
			}
		}
	}
	_, _, err := d.modify(p.ID, func(x *Job) bool {
		if x.Segmented == nil || x.Segmented.Failed != "" {
			return false
		}
		x.Segmented.Failed = "cancelled by " + p.Cancel.By
		x.record(now, EventStep, x.State, "failing: "+x.Segmented.Failed)
		return true
	})
	if err == nil {
		d.kickRound()
	}
	return err
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func stepWhy(s Job) string {
	if r := s.Result; r != nil {
		if r.Error != "" {
			return fmt.Sprintf("%s: %s", s.State, r.Error)
		}
		return fmt.Sprintf("%s: %s code %d %s", s.State, r.Phase, r.Code, r.Message)
	}
	return string(s.State)
}

// step is a new step job of parent p.
func (d *Dispatcher) step(p Job, op, kind string, run, attempt int, target string, frags []uint64, train string) Job {
	now := d.cfg.Now()
	s := Job{
		ID: StepID(p.ID, kind, run, attempt), Dataset: p.Dataset, Op: op, Index: p.Index, AdmittedVersion: p.AdmittedVersion,
		Schema: p.Schema, Limits: p.Limits, Engine: p.Engine, TraceParent: p.TraceParent,
		ExecuteDeadline: p.ExecuteDeadline, State: StatePending, SlotHeld: true, Refresh: RefreshNotRequired, Created: now,
		Parent: p.ID, Target: target, Segment: &rpc.SegmentSpec{BuildID: p.Segmented.BuildID, FragmentIDs: frags, TrainUUID: train},
	}
	if op == rpc.OpSegment && attempt == 1 {
		s.Fault = p.Fault // test-only: a segmented job's fault hits each segment's first build, so its rebuild runs
	}
	detail := ""
	if frags != nil {
		detail = fmt.Sprintf("segment %d attempt %d: fragments %v", run, attempt, frags)
	}
	s.record(now, EventSubmit, "", detail)
	return s
}

// createSteps journals the new steps with the parent (RUNNING, attempts counted) in one
// transaction, or the failure reason; a step that exists already is left as it is.
func (d *Dispatcher) createSteps(p Job, want []Job, fail string) error {
	if len(want) == 0 && fail == "" {
		return nil
	}
	now := d.cfg.Now()
	err := d.store.Update(func(tx Tx) error {
		x, err := tx.Get(p.ID)
		if err != nil {
			return err
		}
		if x.Segmented == nil || x.Segmented.Failed != "" || !x.Unresolved() {
			return errNoChange
		}
		if fail != "" {
			x.Segmented.Failed = fail
			x.record(now, EventStep, x.State, "failing: "+fail)
			return tx.Put(&x)
		}
		for _, s := range want {
			if _, err := tx.Get(s.ID); err == nil {
				return errNoChange // another round or node created it: re-read next round
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
			if err := countAttempt(x.Segmented, p.ID, s); err != nil {
				return err
			}
			if err := tx.Put(&s); err != nil {
				return err
			}
		}
		from := x.State
		x.State = StateRunning
		names := make([]string, len(want))
		for i, s := range want {
			names[i] = s.ID + "→" + s.Target
		}
		x.record(now, EventStep, from, "steps "+strings.Join(names, ", "))
		return tx.Put(&x)
	})
	if errors.Is(err, errNoChange) {
		return nil
	}
	if err == nil {
		d.kickRound()
	}
	return err
}

// countAttempt counts step s in plan sp, or says errNoChange when sp's count is not the one
// before s (another round or node created a step in between).
func countAttempt(sp *SegmentedPlan, parent string, s Job) error {
	rest := strings.TrimPrefix(s.ID, parent+".")
	count := &sp.TrainAttempts
	switch s.Op {
	case rpc.OpSegment:
		var run, attempt int
		if _, err := fmt.Sscanf(rest, "seg%d.a%d", &run, &attempt); err != nil {
			return err
		}
		if sp.Attempts[run] != attempt-1 {
			return errNoChange
		}
		sp.Attempts[run] = attempt
		return nil
	case rpc.OpCommitSegments:
		count = &sp.CommitAttempts
	}
	attempt := 1
	if _, tail, ok := strings.Cut(rest, ".a"); ok {
		if _, err := fmt.Sscanf(tail, "%d", &attempt); err != nil {
			return err
		}
	}
	if *count == 0 && attempt > 1 {
		*count = 1 // journaled before attempts were counted: its first step exists
	}
	if *count != attempt-1 {
		return errNoChange
	}
	*count = attempt
	return nil
}

// settleParent ends segmented job id with the outcome of its commit (or NOT_COMMITTED).
func (d *Dispatcher) settleParent(id string, to State, res *Result, detail string) error {
	now := d.cfg.Now()
	_, changed, err := d.modify(id, func(x *Job) bool {
		if x.State.Settled() {
			return false
		}
		from := x.State
		x.State, x.SlotHeld, x.Result = to, false, res
		if to == StateCommitted {
			d.requireRefresh(x) // the host refreshes once, for the job: its steps never ask
		}
		x.record(now, EventAnswer, from, detail)
		return true
	})
	if changed {
		d.log.Info("segmented job settled", "job", id, "outcome", to, "detail", detail)
	}
	return err
}

func (d *Dispatcher) callerNamed(name string) (caller, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e := d.sidecars[name]
	if e == nil || exited(e.sc) {
		return nil, fmt.Errorf("%w: sidecar %s is not live here", ErrNoSidecar, name)
	}
	c, ok := e.sc.(caller)
	if !ok {
		return nil, fmt.Errorf("%w: sidecar %s has no Call", ErrNoSidecar, name)
	}
	return c, nil
}

// adopt moves build's custody from sidecar from to sidecar to: from lists the build's tickets, to
// reserves the same keys of the dataset's store for the build (its durable reservation is the
// receipt), and only then from accepts them (releases without deleting). Interrupted anywhere, it is run again: both may
// then hold a key, never neither; a builder that lists nothing has nothing left to move.
func (d *Dispatcher) adopt(ctx context.Context, store rpc.StoreSpec, build, from, to string) error {
	fc, err := d.callerNamed(from)
	if err != nil {
		return err
	}
	tc, err := d.callerNamed(to)
	if err != nil {
		return err
	}
	owner := rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: rpc.BuildOwner(build)}
	for {
		var st rpc.ObjectsStatusResult
		if err := fc.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{Owner: &owner, Tickets: true}, &st); err != nil {
			return err
		}
		if len(st.Tickets) == 0 {
			return nil
		}
		var keys []string
		for _, tk := range st.Tickets {
			if tk.State == "held" {
				keys = append(keys, tk.Key)
			}
		}
		if len(keys) == 0 {
			return nil
		}
		var rr rpc.ObjectsReserveResult
		if err := tc.Call(ctx, rpc.MethodObjectsReserve, rpc.ObjectsReserveParams{Owner: owner, Store: store, Keys: keys}, &rr); err != nil {
			return fmt.Errorf("reserve on %s: %w", to, err)
		}
		var released rpc.ObjectsOwnerStatus
		if err := fc.Call(ctx, rpc.MethodObjectsAccept, rpc.ObjectsReleaseParams{Owner: owner, Store: &store, Keys: keys}, &released); err != nil {
			return fmt.Errorf("accept on %s: %w", from, err)
		}
		if !st.Truncated {
			return nil
		}
	}
}

// abandonBuild ends the build's custody on every live sidecar of the plan: objects.abandon of its
// owner deletes what it still holds there. What a gone sidecar held is taken over first by a live
// one, from storage (takeOver): the build's area, and for a build that failed the folders of the
// segments it wrote (lost; none of them is published).
func (d *Dispatcher) abandonBuild(ctx context.Context, p Job, lost []string) error {
	sp := p.Segmented
	owner := rpc.ObjectOwner{Kind: rpc.OwnerHostTxn, ID: rpc.BuildOwner(sp.BuildID)}
	live := sp.live()
	if len(live) == 0 {
		return fmt.Errorf("%w: every sidecar of build %s's plan is gone", ErrNoSidecar, sp.BuildID)
	}
	if len(sp.Gone) > 0 {
		if err := d.takeOver(ctx, p, live[0], lost); err != nil {
			return err
		}
	}
	for _, n := range live {
		c, err := d.callerNamed(n)
		if err != nil {
			return err
		}
		var st rpc.ObjectsOwnerStatus
		if err := c.Call(ctx, rpc.MethodObjectsAbandon, rpc.ObjectsReleaseParams{Owner: owner, All: true}, &st); err != nil {
			return fmt.Errorf("objects.abandon on %s: %w", n, err)
		}
	}
	d.releaseReturned(ctx, sp, owner)
	return nil
}

// releaseReturned releases what a gone sidecar that is live here again still records of the
// build: objects.accept, never abandon — whatever it held was taken over by a live sidecar and is
// published or deleted by now. One that has not come back keeps its tickets (PROTOCOL.md §9).
func (d *Dispatcher) releaseReturned(ctx context.Context, sp *SegmentedPlan, owner rpc.ObjectOwner) {
	for _, n := range sp.Gone {
		if !d.liveHere(n) {
			continue
		}
		c, err := d.callerNamed(n)
		if err == nil {
			var st rpc.ObjectsOwnerStatus
			err = c.Call(ctx, rpc.MethodObjectsAccept, rpc.ObjectsReleaseParams{Owner: owner, All: true}, &st)
		}
		if err != nil {
			d.log.Warn("a returned sidecar keeps the build's tickets", "build", sp.BuildID, "sidecar", n, "error", err)
		}
	}
}
