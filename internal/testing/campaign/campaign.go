package campaign

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/internal/testing/minioproc"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storecfg"
	"github.com/hashicorp/go-hclog"
)

// bucket is the campaign's bucket on its MinIO.
const bucket = "campaign"

// run is one campaign in progress.
type run struct {
	cfg Config
	log hclog.Logger
	dir string // the campaign's own directory: MinIO data, job store, sidecar state, logs

	minio    *minioproc.Server
	ownMinIO bool
	store    storage.Store // the campaign's own view of the bucket, for truth
	spec     rpc.StoreSpec
	// storeName is the ledger's name for spec: what tickets in the campaign's bucket carry.
	storeName string
	prefix    string // every dataset of this run lives under it: a given MinIO may hold others
	datasets  []string
	format    format // the engine's dataset format: how datasets are made and read back
	// setupVersions are the versions of each dataset that setup wrote (path → latest after it).
	setupVersions map[string]int64

	cgroupParent, stateDir string
	credsFile              string // the sidecars' --s3-credentials-file
	jobs                   dispatch.Store
	d                      *dispatch.Dispatcher
	nodes                  []*node
	plan                   map[string]planned // job id → plan
	fo                     *failover          // a failover campaign's etcd and host processes; nil for Run

	stepHit  map[string]bool // segmented job → its step fault was injected (under mu)
	ctx      context.Context // the campaign's context, for fault goroutines
	faults   sync.WaitGroup
	outageMu sync.Mutex

	mu  sync.Mutex
	rep *Report
}

// Run runs a campaign and checks it. The error is about the campaign itself (it could not be set
// up or driven); what the checker found is in Report.Violations.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if runtime.GOOS != "linux" {
		return rep, fmt.Errorf("%w: %s (needs Linux cgroups and /proc)", ErrUnsupported, runtime.GOOS)
	}
	cfg, err = cfg.withDefaults()
	if err != nil {
		return rep, err
	}
	kinds := Kinds()
	switch {
	case cfg.Segments:
		kinds = SegmentKinds()
	case cfg.Engine == EngineLance:
		kinds = LanceKinds()
	}
	r := &run{cfg: cfg, ctx: ctx, rep: newReport(cfg, kinds), plan: map[string]planned{}, setupVersions: map[string]int64{},
		stepHit: map[string]bool{}}
	return r.execute(ctx, r.setup)
}

// execute runs a campaign's phases, timing each: setup, drive (until every fault is over),
// converge, check, teardown. Without failover hosts the campaign's own dispatcher drives the
// jobs; with them, the hosts do.
func (r *run) execute(ctx context.Context, setup func(context.Context) error) (rep Report, err error) {
	start := time.Now()
	defer func() {
		r.rep.Durations.Total = time.Since(start)
		rep = *r.rep
	}()
	if err := setup(ctx); err != nil {
		r.teardown()
		return rep, err
	}
	r.rep.Durations.Setup = time.Since(start)
	stop := r.startDispatcher()
	t := time.Now()
	err = r.drive(ctx)
	if err == nil && r.fo != nil {
		err = r.waitSent(ctx) // every fault a send schedules is scheduled
	}
	r.faults.Wait() // every outage is over and every killed sidecar or host has a successor
	r.rep.Durations.Drive = time.Since(t)
	if err == nil {
		t = time.Now()
		r.converge(ctx)
		r.rep.Durations.Converge = time.Since(t)
		t = time.Now()
		r.check(ctx)
		if r.fo != nil {
			r.checkJournaledSends()
		}
		r.rep.Durations.Check = time.Since(t)
	}
	stop()
	t = time.Now()
	r.teardown()
	r.rep.Durations.Teardown = time.Since(t)
	return rep, err
}

// startDispatcher runs the campaign's own dispatcher until the returned stop is called; a
// failover campaign's dispatcher only admits and lists.
func (r *run) startDispatcher() (stop func()) {
	if r.fo != nil {
		return func() {}
	}
	dctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.d.Run(dctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// setup makes the campaign directory, MinIO, the datasets, the job store, the dispatcher and the
// sidecars. What it made is undone by teardown, also after a failure.
func (r *run) setup(ctx context.Context) error {
	if err := r.setupCommon(ctx); err != nil {
		return err
	}
	var err error
	if r.jobs, err = dispatch.OpenBolt(filepath.Join(r.dir, "jobs.db"), dispatch.BoltOptions{}); err != nil {
		return fmt.Errorf("%w: job store: %w", ErrSetup, err)
	}
	if r.d, err = dispatch.New(r.dispatchConfig(r.jobs)); err != nil {
		return fmt.Errorf("%w: dispatcher: %w", ErrSetup, err)
	}
	for i := range r.cfg.Sidecars {
		n := &node{name: fmt.Sprintf("node-%d", i), r: r}
		r.nodes = append(r.nodes, n)
		if err := n.start(ctx); err != nil {
			return fmt.Errorf("%w: sidecar %s: %w", ErrSetup, n.name, err)
		}
	}
	return nil
}

// dispatchConfig is the campaign dispatcher's configuration on store.
func (r *run) dispatchConfig(store dispatch.Store) dispatch.Config {
	return dispatch.Config{
		Store: store, Interval: 200 * time.Millisecond, ExecuteDeadline: r.cfg.ExecuteDeadline,
		AnswerGrace: 15 * time.Second, MaxInFlightPerSidecar: r.cfg.Executors,
		ResolveRetryInterval: time.Second, ResolveTimeout: 20 * time.Second,
		MaxUnresolvedPerDataset: r.cfg.Mutations + 1, MaxUnresolved: r.cfg.Mutations + 1,
		Credentials: r.credentials, Logger: r.log.Named("dispatch"),
	}
}

// setupCommon makes what every campaign needs: its directory and log, MinIO, the datasets and
// the plan.
func (r *run) setupCommon(ctx context.Context) error {
	base := r.cfg.WorkDir
	if base == "" {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "steward-campaign-")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	// Searchable, not readable: a sidecar's contained workers (another uid) reach their temp dirs
	// below it (sidecarTemp).
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("%w: %w", ErrSetup, err)
	}
	r.dir, r.rep.Dir = dir, dir
	r.stateDir = filepath.Join(dir, "state")
	r.cgroupParent = "steward-campaign-" + randHex(6)
	r.rep.CgroupParent = r.cgroupParent
	r.log = r.cfg.Logger
	if r.log == nil {
		f, err := os.Create(filepath.Join(dir, "campaign.log"))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		r.log = hclog.New(&hclog.LoggerOptions{Name: "campaign", Output: f, Level: hclog.Info, JSONFormat: true})
	}
	if err := r.startMinIO(ctx); err != nil {
		return err
	}
	r.format = builtinFormat{store: r.store, rows: r.cfg.Rows}
	if r.cfg.Engine == EngineLance {
		tmp := filepath.Join(dir, "tmp")
		if err := os.Mkdir(tmp, 0o700); err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		f := &lanceFormat{tools: r.cfg.Lance, store: r.store, bucket: bucket, endpoint: r.minio.Endpoint,
			creds: r.minioCredentials(), rows: r.cfg.Rows, workDir: tmp, fragments: 2}
		if r.cfg.Segments {
			f.fragments = segmentFragments
		}
		r.format = f
	}
	if err := r.makeDatasets(ctx); err != nil {
		return err
	}
	for _, p := range r.makePlan() {
		r.plan[p.id()] = p
	}
	return nil
}

// makePlan draws the run's plan from its seed.
func (r *run) makePlan() []planned {
	if r.cfg.Segments {
		return makeSegmentPlan(r.cfg.Seed, r.cfg.Mutations, r.cfg.Datasets, r.cfg.Kinds)
	}
	pc := builtinPace
	if r.cfg.Engine == EngineLance {
		pc = lancePace
	}
	return makePlan(r.cfg.Seed, r.cfg.Mutations, r.cfg.Datasets, len(r.format.columns()), r.cfg.Kinds, pc)
}

func (r *run) startMinIO(ctx context.Context) error {
	if r.minio = r.cfg.MinIO; r.minio == nil {
		var err error
		if r.minio, err = minioproc.Start(r.cfg.MinIOBinary, filepath.Join(r.dir, "minio")); err != nil {
			return fmt.Errorf("%w: minio: %w", ErrSetup, err)
		}
		r.ownMinIO = true
	}
	// The campaign reaches the bucket through the same spec and mapping as its sidecars' workers.
	store, err := rpc.StoreSpec{URL: "s3://" + bucket, Endpoint: r.minio.Endpoint}.Parse()
	if err != nil {
		return fmt.Errorf("%w: store spec: %w", ErrSetup, err)
	}
	cfg := storecfg.Config(store, r.minioCredentials())
	cfg.MaxRetries, cfg.RequestTimeout = 1, 10*time.Second
	if r.store, err = storage.OpenStore(ctx, cfg); err != nil {
		return fmt.Errorf("%w: open bucket: %w", ErrSetup, err)
	}
	r.spec, r.storeName = store.Spec(), store.Name()
	// The sidecars' own keys (index.resolve, cleanup, recovery) as in production: a 0600 file,
	// for the campaign's store only; never their environment.
	r.credsFile = filepath.Join(r.dir, "s3-credentials")
	if err := os.WriteFile(r.credsFile, storecfg.FormatCredentials(*r.minioCredentials()), 0o600); err != nil {
		return fmt.Errorf("%w: credentials file: %w", ErrSetup, err)
	}
	return nil
}

// credentials are the per-call credentials the dispatcher sends with every job and resolve.
func (r *run) credentials(context.Context, rpc.DatasetRef) (*rpc.Credentials, error) {
	return r.minioCredentials(), nil
}

func (r *run) minioCredentials() *rpc.Credentials {
	return &rpc.Credentials{AccessKey: r.minio.AccessKey, SecretKey: r.minio.SecretKey}
}

func (r *run) ref(ds int) rpc.DatasetRef { return rpc.DatasetRef{Store: r.spec, Path: r.datasets[ds]} }

// teardown stops the dispatcher, the sidecars (gracefully: each kills and reaps its workers),
// and MinIO if the campaign started it; then it looks for leftover processes and cgroups, and
// removes the campaign directory unless Keep.
func (r *run) teardown() {
	if r.d != nil {
		r.d.Close()
	}
	if r.fo != nil {
		r.stopFailover()
	}
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.stop()
		}()
	}
	wg.Wait()
	if r.jobs != nil {
		r.jobs.Close()
	}
	if r.ownMinIO && r.minio != nil {
		r.minio.Stop()
	}
	if r.dir == "" {
		return
	}
	procs, cgroups, err := leftovers(r.dir, r.cgroupParent)
	if err != nil {
		r.violate("leftovers", "", err.Error())
	}
	r.rep.LeftoverProcesses, r.rep.LeftoverCgroups = len(procs), len(cgroups)
	if r.cfg.Engine == EngineLance {
		r.leftoverTemp()
	}
	for _, p := range procs {
		r.violate("leftover-process", "", p)
	}
	for _, c := range cgroups {
		r.violate("leftover-cgroup", "", c)
	}
	if !r.cfg.Keep {
		if err := os.RemoveAll(r.dir); err != nil {
			r.log.Warn("cannot remove the campaign directory", "dir", r.dir, "error", err)
		}
		r.rep.Dir = ""
	}
}

// leftoverTemp counts what is left in the sidecars' TMPDIR: a violation each. A sidecar keeps
// its domains' temp dirs in its own steward-<pid>-<start> dir and removes it when it exits; a
// SIGKILLed one cannot, but node.kill starts its successor on the same TMPDIR only after it has
// exited, and that successor removes the dead one's dir at its start. By teardown every sidecar
// has exited cleanly, so anything left is a leak (a kill whose successor never started is also
// a sidecar-restart violation). Each domain dir inside a leftover sidecar dir counts, and the
// sidecar dir itself when it is empty.
func (r *run) leftoverTemp() {
	left, err := tempLeftovers(r.sidecarTemp())
	if err != nil {
		r.violate("leftovers", "", err.Error())
	}
	r.rep.LeftoverTemp = len(left)
	for _, p := range left {
		r.violate("leftover-temp", "", p)
	}
}

// tempLeftovers lists the entries of dir, each non-empty directory by its entries instead.
func tempLeftovers(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		var inner []os.DirEntry
		if e.IsDir() {
			inner, _ = os.ReadDir(p)
		}
		if len(inner) == 0 {
			out = append(out, p)
		}
		for _, d := range inner {
			out = append(out, filepath.Join(p, d.Name()))
		}
	}
	return out, nil
}

func (r *run) violate(check, job, detail string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Violations = append(r.rep.Violations, Violation{Check: check, Job: job, Detail: detail})
}

func (r *run) finding(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Findings = append(r.rep.Findings, fmt.Sprintf(format, args...))
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// retry calls fn every 200ms until it succeeds, ctx ends or bound passes (MinIO may be down).
func retry(ctx context.Context, bound time.Duration, fn func() error) error {
	deadline := time.Now().Add(bound)
	for {
		err := fn()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
