package campaign

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cba1309c/steward/internal/testing/minioproc"
	"github.com/hashicorp/go-hclog"
)

// Config configures a campaign. Zero values take the documented defaults.
type Config struct {
	// Steward is the steward executable the sidecars run as. Required.
	Steward string
	// Node is the executable a failover campaign (RunFailover) starts as each host process,
	// with the arguments `node --name N --dir D`; it must run NodeMain (cmd/steward-campaign
	// does, and so may a test binary re-run by its TestMain). Required by RunFailover.
	Node string
	// MinIOBinary is the MinIO executable the campaign starts (and stops and restarts) under
	// WorkDir. Required unless MinIO is set.
	MinIOBinary string
	// EtcdBinary is the etcd executable a failover campaign (RunFailover) starts its 3-member
	// cluster from, under WorkDir. Default: the tools directory's ($STEWARD_TOOLS/etcd, built by
	// scripts/etcd.sh install).
	EtcdBinary string
	// MinIO is a server the campaign may stop and restart instead of starting its own. It must
	// be running; the campaign leaves it running and does not remove its data.
	MinIO *minioproc.Server
	// WorkDir is where a fresh directory for the campaign (MinIO data, job store, sidecar state,
	// logs) is made. Default os.TempDir().
	WorkDir string
	// Keep leaves the campaign's directory in place after the run (it is removed otherwise).
	Keep bool
	// Engine is the engine every mutation runs on: EngineBuiltin (default; its manifests are
	// read by the checker) or EngineLance (engines/lance, registered in every sidecar with
	// `--engine lance=…`; datasets made and the version chain read with Lance's own library).
	Engine string
	// Lance locates the Lance engine. Required when Engine is EngineLance.
	Lance LanceTools
	// Segments makes every mutation a segmented index build (host/dispatch SubmitSegmented:
	// TRAIN for IVF_PQ, 2 or 3 SEGMENTs, one COMMIT_SEGMENTS) of a new index, one build per
	// dataset at a time, drawing SegmentKinds. Lance only.
	Segments bool

	// Mutations is the number of mutations to submit. Default 200.
	Mutations int
	// Seed drives every random choice of the plan (operations, faults, delays). Default 1.
	Seed int64
	// Kinds are the fault kinds to draw from (see Kinds; LanceKinds on Lance). Default: all of
	// them. The first
	// len(Kinds) mutations take each kind once, in a seeded order; of the rest one in four is
	// clean (when KindClean is listed) and the others draw a fault kind uniformly.
	Kinds []string
	// Datasets is the number of datasets mutations spread over. Default 3.
	Datasets int
	// Rows is the number of generated rows of each dataset. Default 20,000 (built-in), 5,000
	// (Lance), 8,000 in 4 fragments (Segments).
	Rows int64
	// Sidecars is the number of sidecars the dispatcher chooses from. Default 2. RunFailover
	// sets it to Hosts (one sidecar per host process).
	Sidecars int
	// Hosts is the number of host processes of a failover campaign (RunFailover), each a
	// dispatcher with its own sidecar on the shared etcd journal. Default 3.
	Hosts int
	// LeaseTTL is the failover host processes' claim lease: how long a SIGKILLed or SIGSTOPped
	// host keeps its claim and its sidecar's epoch in the journal. Default 3s.
	LeaseTTL time.Duration
	// Executors is each sidecar's executor pool size, and the dispatcher's per-sidecar cap.
	// Default 2.
	Executors int
	// Outstanding caps the jobs submitted and not yet answered (PENDING or RUNNING). Default
	// Sidecars*Executors + 2; with Segments, Datasets (one build per dataset at a time).
	Outstanding int
	// ExecuteDeadline is the dispatcher's execute deadline for every job. It must fund the
	// sidecars' kill budget (KillBudget) plus a runnable window long enough for a real build.
	// Default 8s (built-in), 20s (Lance: every job starts Python, and a COMMITTED answer waits
	// for the engine's settle in a fresh domain).
	ExecuteDeadline time.Duration
	// ConvergeTimeout bounds the wait for convergence after the last submission. Default 3m.
	ConvergeTimeout time.Duration
	// LedgerGrace is how long the ledgers get to drain by themselves once every job is settled,
	// before the campaign re-resolves stranded invocations on the sidecar that holds their
	// tickets (reported as findings). Default 40s: longer than the sidecar's 30s recovery pass.
	LedgerGrace time.Duration
	// Logger receives the campaign's progress lines and the sidecars' and dispatcher's logs.
	// Default: hclog at warn into <campaign dir>/campaign.log.
	Logger hclog.Logger
	// Progress, if set, is called after each submission and during convergence.
	Progress func(Progress)

	// failover is set by RunFailover: the kinds are the failover campaign's (failoverKinds).
	failover bool
}

// Progress is a snapshot for a live display.
type Progress struct {
	Phase     string // "drive", "converge"
	Submitted int
	Total     int
	Settled   int
	Unknown   int
	Detail    string
}

// The sidecars' kill ladder: clock skew + term grace + reap bound, plus the least runnable
// window. A deadline closer than KillBudget is refused at receive.
const (
	clockSkew   = 100 * time.Millisecond
	termGrace   = 500 * time.Millisecond
	reapBound   = 3 * time.Second
	minRunnable = 300 * time.Millisecond
	// KillBudget is what a deadline must fund before the sidecar admits a mutation.
	KillBudget = clockSkew + termGrace + reapBound + minRunnable
	// workerMemory is the sidecars' worker memory limit: small, so the oom fault ends quickly.
	workerMemory = 256 << 20
)

func (c Config) withDefaults() (Config, error) {
	if c.Steward == "" {
		return c, fmt.Errorf("%w: Steward (the steward executable) is required", ErrConfig)
	}
	if c.MinIO == nil && c.MinIOBinary == "" {
		return c, fmt.Errorf("%w: MinIOBinary or MinIO is required", ErrConfig)
	}
	if c.Mutations < 0 || c.Datasets < 0 || c.Sidecars < 0 || c.Hosts < 0 || c.Executors < 0 || c.Rows < 0 {
		return c, fmt.Errorf("%w: counts must not be negative", ErrConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	kinds := Kinds()
	switch c.Engine {
	case "", EngineBuiltin:
		c.Engine = EngineBuiltin
	case EngineLance:
		if err := c.Lance.check(); err != nil {
			return c, err
		}
		kinds = LanceKinds()
		if c.Rows == 0 && !c.Segments {
			c.Rows = 5000
		}
		if c.ExecuteDeadline == 0 {
			c.ExecuteDeadline = 20 * time.Second
		}
	default:
		return c, fmt.Errorf("%w: unknown engine %q (want %s or %s)", ErrConfig, c.Engine, EngineBuiltin, EngineLance)
	}
	if c.Segments {
		if c.Engine != EngineLance {
			return c, fmt.Errorf("%w: segmented builds run on the %s engine (engine %q)", ErrConfig, EngineLance, c.Engine)
		}
		kinds = SegmentKinds()
		if c.Rows == 0 {
			c.Rows = 8000
		}
		def(&c.Datasets, 3)
		def(&c.Outstanding, c.Datasets)
	}
	if c.failover {
		kinds = failoverKinds(c.Segments)
	}
	def(&c.Mutations, 200)
	def(&c.Datasets, 3)
	def(&c.Sidecars, 2)
	def(&c.Executors, 2)
	def(&c.Outstanding, c.Sidecars*c.Executors+2)
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Rows == 0 {
		c.Rows = 20000
	}
	if c.ExecuteDeadline == 0 {
		c.ExecuteDeadline = 8 * time.Second
	}
	if c.ExecuteDeadline <= KillBudget {
		return c, fmt.Errorf("%w: ExecuteDeadline %s does not fund the kill budget %s", ErrConfig, c.ExecuteDeadline, KillBudget)
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 3 * time.Second
	}
	if c.ConvergeTimeout == 0 {
		c.ConvergeTimeout = 3 * time.Minute
	}
	if c.LedgerGrace == 0 {
		c.LedgerGrace = 40 * time.Second
	}
	if len(c.Kinds) == 0 {
		c.Kinds = kinds
	}
	for _, k := range c.Kinds {
		if !knownKind(k) {
			return c, fmt.Errorf("%w: unknown fault kind %q", ErrConfig, k)
		}
		if !slices.Contains(kinds, k) {
			return c, fmt.Errorf("%w: fault kind %q does not apply to this campaign (these do: %s)", ErrConfig, k, strings.Join(kinds, ","))
		}
	}
	return c, nil
}
