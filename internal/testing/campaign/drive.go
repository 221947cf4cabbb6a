package campaign

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
)

// makeDatasets creates the campaign's datasets in the engine's format (two fragments each), at
// once.
func (r *run) makeDatasets(ctx context.Context) error {
	r.prefix = "run-" + randHex(4)
	errs := make([]error, r.cfg.Datasets)
	made := make([]int64, r.cfg.Datasets)
	var wg sync.WaitGroup
	for i := range r.cfg.Datasets {
		r.datasets = append(r.datasets, fmt.Sprintf("%s/ds-%d", r.prefix, i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			made[i], errs[i] = r.format.create(ctx, r.datasets[i], uint64(r.cfg.Seed)+uint64(i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("%w: create dataset %s: %w", ErrSetup, r.datasets[i], err)
		}
		r.setupVersions[r.datasets[i]] = made[i]
	}
	return nil
}

// drive submits the plan, keeping at most Outstanding jobs unanswered.
func (r *run) drive(ctx context.Context) error {
	plan := r.makePlan()
	for i, p := range plan {
		if err := r.waitOutstanding(ctx); err != nil {
			return err
		}
		submit := r.submit
		if r.cfg.Segments {
			submit = r.submitSegmented
		}
		if err := submit(ctx, p); err != nil {
			return fmt.Errorf("submit %s: %w", p.id(), err)
		}
		r.progress(Progress{Phase: "drive", Submitted: i + 1, Total: len(plan)})
	}
	return nil
}

// waitOutstanding blocks while Outstanding jobs are PENDING or RUNNING.
func (r *run) waitOutstanding(ctx context.Context) error {
	for {
		var jobs []dispatch.Job
		err := retry(ctx, time.Minute, func() (err error) {
			jobs, err = r.d.List(dispatch.ListOptions{Active: true})
			return err
		})
		if err != nil {
			return err
		}
		n := 0
		for _, j := range jobs {
			if j.Parent == "" && (j.State == dispatch.StatePending || j.State == dispatch.StateRunning) { // a step is no submission
				n++
			}
		}
		if n < r.cfg.Outstanding {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// submit admits p on its preferred dataset and index name, or on the next free pair when a live
// job holds it (the dispatcher's same-name fence), pinned at that dataset's latest version.
func (r *run) submit(ctx context.Context, p planned) error {
	columns := r.format.columns()
	pairs := r.cfg.Datasets * len(columns)
	for {
		for k := range pairs {
			ds := (p.dataset + k/len(columns)) % r.cfg.Datasets
			col := columns[(p.column+k)%len(columns)]
			pinned, err := r.latest(ctx, ds)
			if err != nil {
				return err
			}
			err = r.admit(ctx, r.request(p, ds, col, pinned))
			if errors.Is(err, dispatch.ErrNameBusy) {
				continue
			}
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// latest is dataset ds's latest version, read for a minute while MinIO is down.
func (r *run) latest(ctx context.Context, ds int) (int64, error) {
	var pinned int64
	err := retry(ctx, time.Minute, func() (err error) {
		if pinned, err = r.format.latest(ctx, r.datasets[ds]); err != nil {
			r.reviveMinIO()
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("latest version of %s: %w", r.datasets[ds], err)
	}
	return pinned, nil
}

// admit submits req. A failure of the shared journal (an etcd member just killed) is retried for
// a minute; a retry that finds the job already there means the lost answer was a success.
func (r *run) admit(ctx context.Context, req dispatch.Request) error {
	for attempt := 0; ; attempt++ {
		_, err := r.d.Submit(ctx, req)
		switch {
		case err == nil:
			return nil
		case attempt > 0 && errors.Is(err, dispatch.ErrJobExists):
			return nil
		case r.fo == nil || attempt >= 300 || ctx.Err() != nil || errors.Is(err, dispatch.ErrNameBusy) ||
			errors.Is(err, dispatch.ErrInvalidJob) || errors.Is(err, dispatch.ErrJobExists):
			return err
		}
		r.log.Info("submit failed; retrying", "job", req.ID, "error", err)
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *run) request(p planned, ds int, col column, pinned int64) dispatch.Request {
	req := dispatch.Request{
		ID: p.id(), Dataset: r.ref(ds), AdmittedVersion: pinned, Op: p.op,
		Index: rpc.IndexSpec{Name: col.index}, IfNotExists: p.ifNotExists, IfExists: p.ifExists,
		Engine: r.format.engine(),
	}
	if p.op != rpc.OpDrop {
		req.Index.Columns, req.Index.Type = []string{col.name}, col.indexType(p.coin)
		req.Index.Params = maps.Clone(col.params)
		req.Schema = []rpc.FieldContract{{Name: col.name, Type: col.typ}}
	}
	switch {
	case p.kind == KindOOM && r.cfg.Engine == EngineLance:
		req.Limits = &rpc.WorkerLimits{MemoryBytes: lanceOOMLimit} // a real OOM kill, not an acted one
	case isWorkerFault(p.kind):
		req.Fault = p.kind
	}
	if p.kind == KindDeadlineUnfundable || p.kind == KindDeadlineTight {
		req.ExecuteDeadline = p.deadline // journaled and sent by the dispatcher itself
	}
	return req
}

// onSend runs in the dispatcher's send path, once per job (per step of a segmented job:
// onStepSend): it records the deadline kinds as injected and schedules the sidecar kills and
// MinIO outages. The kind it returns is a step fault carried by the params, counted once the
// answer shows the step ran (stepAnswered).
func (r *run) onSend(s *sidecar, p rpc.MutateParams) (rpc.MutateParams, string) {
	if p.Segment != nil {
		return r.onStepSend(s, p)
	}
	pl, ok := r.plan[p.JobID]
	if !ok {
		return p, ""
	}
	switch pl.kind {
	case KindDeadlineUnfundable, KindDeadlineTight:
		r.inject(pl.kind, true, false)
	case KindSidecarKill:
		r.scheduleKill(s, pl)
	case KindMinIOOutage:
		r.scheduleOutage(s, pl)
	default:
		r.inject(pl.kind, true, false)
	}
	return p, ""
}

// scheduleKill SIGKILLs s pl.delay from now (and starts its successor), counting the fault.
func (r *run) scheduleKill(s *sidecar, pl planned) {
	r.faults.Add(1)
	go func() {
		defer r.faults.Done()
		time.Sleep(pl.delay)
		delivered, busy, err := s.node.kill(r.ctx, s)
		if err != nil {
			r.violate("sidecar-restart", pl.id(), err.Error())
		}
		r.inject(pl.kind, delivered, busy)
		r.log.Info("sidecar killed", "node", s.node.name, "job", pl.id(), "delivered", delivered, "busy", busy)
	}()
}

// scheduleOutage stops MinIO pl.delay from now for pl.outage, counting the fault.
func (r *run) scheduleOutage(s *sidecar, pl planned) {
	r.faults.Add(1)
	go func() {
		defer r.faults.Done()
		time.Sleep(pl.delay)
		r.inject(pl.kind, r.outage(pl.outage), s.inflight.Load() > 0)
	}()
}

// outage stops MinIO for d and starts it again. Outages do not overlap: a second one while the
// first lasts is not delivered.
func (r *run) outage(d time.Duration) bool {
	if !r.outageMu.TryLock() {
		return false
	}
	defer r.outageMu.Unlock()
	r.log.Info("minio stopped", "for", d)
	r.minio.Stop()
	time.Sleep(d)
	err := retry(context.Background(), time.Minute, r.minio.Start)
	if err != nil {
		r.violate("minio-restart", "", err.Error())
	}
	r.log.Info("minio started again", "error", err)
	return true
}

// reviveMinIO starts MinIO again if it died outside an outage the campaign injected: that is a
// finding (the campaign's own process control failed), not a fault to hide.
func (r *run) reviveMinIO() {
	if r.minio.Running() || !r.outageMu.TryLock() {
		return
	}
	defer r.outageMu.Unlock()
	if r.minio.Running() {
		return
	}
	r.finding("MinIO died outside an injected outage; started again")
	if err := r.minio.Start(); err != nil {
		r.log.Warn("minio start", "error", err)
	}
}

// inject counts one injected fault.
func (r *run) inject(kind string, delivered, busy bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.rep.kind(kind)
	k.Sent++
	if delivered {
		k.Delivered++
	}
	if busy {
		k.Busy++
	}
}

func (r *run) progress(p Progress) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(p)
	}
}
