package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"
)

// Server is one sidecar process's state: its epoch, its methods and its lifecycle.
type Server struct {
	cfg     Config
	log     hclog.Logger
	epoch   string
	started time.Time
	router  *rpc.Router
	metrics *metrics

	mu       sync.Mutex
	closing  bool
	inFlight sync.WaitGroup
	active   atomic.Int64
	stopOnce sync.Once
	stop     chan struct{}
	reason   string

	iso        *isolation.Supervisor // nil: isolation did not verify, mutations are refused
	tempDir    string                // this sidecar's own dir in Config.TempDir, holding its domains' temp dirs (tempdir.go)
	image      string                // the worker image in tempDir that workers start from ("": Config.Isolation.WorkerPath; workerimage.go)
	isoReport  isolation.Report
	dedup      *dedup
	cancels    *cancels         // the admitted mutations by invocation id, for index.cancel (cancel.go)
	condWrites *condWrites      // per-store verdicts on put-if-absent (condwrite.go)
	custody    *custody.Custody // nil only while New fails
	ledgerLock *os.File         // the journal slot's lock, held while custody is open

	qmu       sync.Mutex // guards sending on and closing queue
	queue     chan *job
	qclosed   bool
	executors sync.WaitGroup // the executor goroutines; they return once queue is closed and drained
	closeOnce sync.Once
	closeErr  error

	engines     map[string]*engine // registered engines by name, fixed after New
	engineOrder []string           // their names, builtin first, in registration order
	gateways    liveGateways       // the invocations whose gateway is open now

	spares *sparePool // the spares: workers started ahead of demand (spares.go)

	metricsHTTP *metricsListener // nil without Config.MetricsListen (metrics_http.go)

	budget     *memBudget   // admission by memory (budget.go)
	budgetFrom budgetSource // where its size came from, for hello

	ownCreds *rpc.Credentials // Config.S3Credentials; handed out by credsFor only
	allow    AllowList        // Config.AllowStores, parsed
}

// MinMaxFrame is the smallest frame bound a sidecar accepts.
const MinMaxFrame = 64 << 10

// New builds a sidecar with a fresh epoch.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if cfg.MaxFrame < MinMaxFrame {
		// Below this a bounded answer (an index.mutate result is at most a few KiB) could be
		// refused as too large after its worker ran: an error must always mean "never executed".
		return nil, fmt.Errorf("sidecar: max frame %d bytes is below the minimum %d", cfg.MaxFrame, MinMaxFrame)
	}
	allow, err := ParseAllowStores(cfg.AllowStores)
	if err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	if cfg.S3Credentials != nil && len(allow) == 0 {
		return nil, errors.New("sidecar: the sidecar's own S3 credentials are given but no store is allowed to receive them (--allow-store)")
	}
	epoch, err := newEpoch()
	if err != nil {
		return nil, err
	}
	s := &Server{
		ownCreds: cfg.S3Credentials,
		allow:    allow,
		cfg:      cfg,
		log:      cfg.Logger,
		epoch:    epoch,
		started:  time.Now(),
		stop:     make(chan struct{}),
		metrics:  newMetrics(cfg.Version, epoch),
	}
	s.router = rpc.NewRouter(rpc.RouterOptions{
		MaxInFlight: cfg.MaxInFlight,
		MaxResult:   cfg.MaxFrame - 256,
		Observe:     s.metrics.observe,
		Track:       s.track,
	})
	s.queue = make(chan *job, cfg.QueueCapacity)
	s.dedup = newDedup(cfg.DedupCapacity)
	s.cancels = newCancels(cfg.DedupCapacity, cfg.DedupRetention)
	s.condWrites = newCondWrites(s.log.Named("condwrite"), s.metrics.reg)
	s.startIsolation()
	s.openBudget()
	// After isolation's preflight: it killed what was left in dead owners' cgroups, so nothing
	// still writes into their temp dirs.
	if err := s.openTempDir(); err != nil {
		_ = s.Close()
		return nil, err
	}
	s.registerEngines()
	s.openSpares()
	if err := s.openLedger(); err != nil {
		_ = s.Close()
		return nil, err
	}
	if err := s.startMetricsListener(); err != nil {
		_ = s.Close()
		return nil, err
	}
	// Without a verified supervisor nothing is ever launched: no executor, no spare worker;
	// index.mutate is refused at receive.
	if s.iso != nil {
		for i := 0; i < cfg.Executors; i++ {
			s.executors.Add(1)
			go s.executor()
		}
	}
	s.register()
	return s, nil
}

// openSpares makes the spare pool; spares are started by the executors, which run only with a
// verified supervisor.
func (s *Server) openSpares() {
	var cpus []int
	if s.iso != nil {
		cpus = s.iso.CPUs()
	}
	memory, _ := s.cfg.Isolation.DomainLimits(0, 0)
	s.spares = newSparePool(s.log, s.launch, s.budget, memory, s.engines[workerproto.BuiltinName], cpus, s.contained())
}

// startIsolation runs the preflight. A sidecar whose isolation does not verify still starts
// (hello reports why, objects.* and metrics work); only index.mutate is refused.
func (s *Server) startIsolation() {
	if s.cfg.DisableIsolation {
		s.isoReport = isolation.Report{Mode: isolation.ModeNone, Reason: "isolation disabled by configuration"}
		return
	}
	iso, err := isolation.New(s.cfg.Isolation)
	if err != nil {
		s.isoReport = isolation.ReportOf(err)
		s.log.Error("isolation unavailable: index.mutate will be refused", "reason", s.isoReport.Reason)
		return
	}
	s.iso, s.isoReport = iso, iso.Report()
	s.log.Info("isolation verified", "mode", s.isoReport.Mode, "leftovers_removed", len(iso.Leftovers()))
}

// Close stops everything the sidecar started: it begins a shutdown if none has begun (queued
// mutations are answered as never launched), kills and reaps every worker domain, waits for the
// executors to deliver their answers, removes its temp dir, and closes the ledger (its tickets
// stay in the journal).
// Call it once the sidecar stops serving; later calls return the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.Shutdown("closing")
		s.stopMetricsListener()
		var err error
		if s.iso != nil {
			s.spares.Close()
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Isolation.ReapBound)
			err = s.iso.Close(ctx)
			cancel()
		}
		// Every domain is dead now, so each executor's session ends within its teardown bound.
		s.executors.Wait()
		s.closeErr = errors.Join(err, s.closeTempDir(), s.closeLedger())
	})
	return s.closeErr
}

// openTempDir sweeps dead sidecars' temp dirs out of Config.TempDir and makes this one's.
func (s *Server) openTempDir() error {
	dir, swept, err := openOwnerTemp(s.cfg.TempDir)
	if len(swept) > 0 {
		s.log.Info("temp dirs of dead sidecars removed", "dirs", swept)
	}
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	s.tempDir = dir
	s.openWorkerImage()
	return nil
}

// openWorkerImage makes (or joins) the worker image in the temp dir when workers re-execute
// this binary, from the worker executable the build embedded (Config.WorkerExecutable) or else
// from this binary; without an image they start from Config.Isolation.WorkerPath (this binary's
// worker mode), as they would anyway.
func (s *Server) openWorkerImage() {
	if s.iso == nil {
		return
	}
	cfg := s.iso.Config()
	if cfg.WorkerPath != isolation.DefaultWorkerPath {
		return
	}
	src := workerSource{exe: s.cfg.WorkerExecutable, path: isolation.DefaultWorkerPath}
	// Started once as a worker probe before any worker depends on it: a temp dir mounted noexec,
	// or a security module that lets this binary run but not a copy of it in /tmp, leave the
	// workers on /proc/self/exe instead of failing every launch.
	image, err := workerImageIn(s.tempDir, src, func(path string) error {
		ctx, cancel := context.WithTimeout(context.Background(), imageProbeTimeout)
		defer cancel()
		return isolation.ProbeExecutable(ctx, path, cfg.WorkerArgs)
	})
	if err != nil {
		s.log.Info("workers start from "+isolation.DefaultWorkerPath, "worker_image", "none", "reason", err.Error())
		return
	}
	s.image = image
	s.log.Info("workers start from the worker image", "worker_image", image, "worker_executable", src.String())
	// The launcher that forks contained workers moves to the image too: the small worker
	// executable forks faster than this binary.
	if err := s.iso.LauncherFrom(image); err != nil {
		s.log.Warn("the launcher stays on "+isolation.DefaultWorkerPath, "reason", err.Error())
	}
	s.isoReport = s.iso.Report()
}

// closeTempDir removes the sidecar's temp dir once every domain is reaped (Close, once).
func (s *Server) closeTempDir() error {
	if s.tempDir == "" {
		return nil
	}
	if err := closeOwnerTemp(s.tempDir); err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	return nil
}

// newEpoch returns 128 random bits: a sidecar process start that no other shares.
func newEpoch() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("sidecar: epoch: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// Epoch returns this process's epoch.
func (s *Server) Epoch() string { return s.epoch }

// Stopping is closed once a shutdown has begun.
func (s *Server) Stopping() <-chan struct{} { return s.stop }

// Shutdown begins a graceful shutdown: new requests are refused with rpc.ErrShuttingDown, in-flight
// ones finish. It is idempotent; the first reason wins.
func (s *Server) Shutdown(reason string) {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.reason = reason
		s.mu.Unlock()
		s.log.Info("shutting down", "reason", reason)
		close(s.stop)
		s.spares.stop()
		s.closeQueue()
	})
}

// stopReason is the reason the shutdown began with.
func (s *Server) stopReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// track admits a request unless the sidecar is shutting down, and counts it until answered. A
// shutdown lets running mutations finish, so they may still be cancelled.
func (s *Server) track(method string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing && method != rpc.MethodShutdown && method != rpc.MethodIndexCancel {
		return nil, fmt.Errorf("%w: %s", rpc.ErrShuttingDown, s.reason)
	}
	s.inFlight.Add(1)
	s.active.Add(1)
	s.metrics.inFlight.Inc()
	return func() {
		s.metrics.inFlight.Dec()
		s.active.Add(-1)
		s.inFlight.Done()
	}, nil
}

// drain waits for in-flight requests to be answered, at most ShutdownGrace, and not at all once
// hostGone closes: with the host gone nobody would read the answers.
func (s *Server) drain(hostGone <-chan struct{}) {
	done := make(chan struct{})
	go func() { s.inFlight.Wait(); close(done) }()
	select {
	case <-done:
	case <-hostGone:
		s.log.Warn("host exited while requests were in flight")
	case <-time.After(s.cfg.ShutdownGrace):
		s.log.Warn("shutdown grace elapsed with requests in flight", "grace", s.cfg.ShutdownGrace)
	}
}

// ServeConn serves one JSON-RPC connection.
func (s *Server) ServeConn(ctx context.Context, rwc io.ReadWriteCloser, framing rpc.Framing) *jsonrpc2.Conn {
	return s.router.ServeConn(ctx, rwc, rpc.StreamOptions{
		Framing:  framing,
		MaxFrame: s.cfg.MaxFrame,
		Rejected: s.metrics.rejectedFrame,
	})
}

func (s *Server) register() {
	handle(s, rpc.MethodHello, s.hello)
	handle(s, rpc.MethodMetrics, s.metricsGet)
	handle(s, rpc.MethodShutdown, s.shutdown)
	handle(s, rpc.MethodIndexMutate, s.mutate)
	handle(s, rpc.MethodIndexResolve, s.resolve)
	handle(s, rpc.MethodIndexCancel, s.cancel)
	handle(s, rpc.MethodIndexPlan, s.plan)
	s.registerObjects()
}

func (s *Server) hello(_ context.Context, p rpc.HelloParams) (rpc.HelloResult, error) {
	if p.ProtocolVersion != rpc.ProtocolVersion {
		return rpc.HelloResult{}, fmt.Errorf("%w: host speaks %d, this sidecar speaks %d",
			rpc.ErrUnsupportedProtocol, p.ProtocolVersion, rpc.ProtocolVersion)
	}
	return rpc.HelloResult{
		ProtocolVersion: rpc.ProtocolVersion,
		Epoch:           s.epoch,
		Pid:             os.Getpid(),
		Version:         s.cfg.Version,
		Capabilities:    []string{rpc.CapMetrics, rpc.CapShutdown, rpc.CapMutate, rpc.CapResolve, rpc.CapCancel, rpc.CapProgress, rpc.CapObjects, rpc.CapSweep, rpc.CapEngines, rpc.CapSegments},
		Engines:         s.wireEngines(),
		Isolation:       wireReport(s.isoReport),
		Limits: &rpc.Limits{
			MaxFrameBytes:   s.cfg.MaxFrame,
			QueueCapacity:   s.cfg.QueueCapacity,
			ExecutorSlots:   s.cfg.Executors,
			KillBudgetMs:    s.killBudget().Milliseconds(),
			MinRunnableMs:   s.cfg.MinRunnable.Milliseconds(),
			WorkerMemoryMax: s.cfg.Isolation.MemoryLimit,
			WorkerPidsMax:   s.cfg.Isolation.PidsLimit,
			LedgerCapacity:  s.cfg.LedgerCapacity,
			LedgerQuota:     s.cfg.LedgerQuota,
		},
		Credentials:  &rpc.CredentialsReport{Source: s.cfg.CredentialsSource, AllowStores: s.allow.names()},
		Storage:      s.storageReport(),
		MemoryBudget: s.helloBudget(),
	}, nil
}

func (s *Server) metricsGet(_ context.Context, _ rpc.MetricsParams) (rpc.MetricsResult, error) {
	text, err := s.metrics.text()
	if err != nil {
		return rpc.MetricsResult{}, fmt.Errorf("%w: gather metrics: %w", rpc.ErrInternal, err)
	}
	return rpc.MetricsResult{ContentType: "text/plain; version=0.0.4", Text: text}, nil
}

func (s *Server) shutdown(_ context.Context, p rpc.ShutdownParams) (rpc.ShutdownResult, error) {
	reason := "requested by host"
	if p.Reason != "" {
		reason += ": " + p.Reason
	}
	s.Shutdown(reason)
	// This call is itself in flight until its answer is written.
	return rpc.ShutdownResult{InFlight: int(s.active.Load()) - 1}, nil
}

// wireReport converts the isolation preflight into its wire form.
func wireReport(r isolation.Report) *rpc.IsolationReport {
	limits := map[string]int64{}
	if r.MemoryLimit != 0 {
		limits["memory_bytes"] = r.MemoryLimit
	}
	if r.SwapLimit != 0 {
		limits["swap_bytes"] = r.SwapLimit
	}
	if r.PidsLimit != 0 {
		limits["pids"] = r.PidsLimit
	}
	w := &rpc.IsolationReport{Mode: string(r.Mode), Verified: r.Verified, Reason: r.Reason,
		Controllers: r.Controllers, Limits: limits, Cgroups: r.Cgroups}
	for _, l := range r.DomainLimits {
		w.DomainLimits = append(w.DomainLimits, rpc.DomainLimit{Name: l.Name, File: l.File, Value: l.Value, Enforced: l.Enforced, Detail: l.Detail})
	}
	if r.Parent.Source != "" {
		w.Parent = &rpc.IsolationParent{Source: r.Parent.Source, Dirs: r.Parent.Dirs, Leaf: r.Parent.Leaf, Why: r.Parent.Why}
	}
	for _, c := range r.Checks {
		w.Checks = append(w.Checks, rpc.IsolationCheck{Name: c.Name, OK: c.OK, Detail: c.Detail, Fix: c.Fix, Optional: c.Optional})
	}
	if r.Containment.Mode != "" {
		w.Containment = &rpc.Containment{Mode: r.Containment.Mode, Guest: r.Containment.Guest, Layers: []rpc.ContainmentLayer{}}
		for _, l := range r.Containment.Layers {
			w.Containment.Layers = append(w.Containment.Layers, rpc.ContainmentLayer{Name: l.Name, Enforced: l.Enforced, Detail: l.Detail})
		}
	}
	return w
}
