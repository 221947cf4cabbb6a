package sidecar

import (
	"os"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/hashicorp/go-hclog"
)

// DefaultWorkerDisk is Config.Gateway.MaxBytes's default: what one invocation may write to its
// store, 20 times what the demo's IVF_PQ build over 200,000 x 128 vectors writes.
const DefaultWorkerDisk = 2 << 30

// DefaultLedgerQuota is Config.LedgerQuota's default.
const DefaultLedgerQuota = 4096

// Config configures a sidecar. The zero value is usable: every field has a documented default.
type Config struct {
	// Logger receives JSON logs (stderr in both modes). Default: hclog JSON on os.Stderr at info.
	Logger hclog.Logger
	// Version is the build version reported by steward.hello. Default "dev".
	Version string
	// Framing of the stdio transport. Default rpc.ContentLength. (go-plugin streams always use
	// Content-Length framing.)
	Framing rpc.Framing
	// MaxFrame bounds one JSON-RPC message in bytes, both directions. Default rpc.DefaultMaxFrame
	// (4 MiB); at least MinMaxFrame (64 KiB).
	MaxFrame int
	// MaxInFlight bounds requests handled at once; excess requests get rpc.ErrOverloaded. Default 1024.
	MaxInFlight int
	// ShutdownGrace bounds how long a graceful shutdown waits for in-flight calls. Default 60s.
	ShutdownGrace time.Duration
	// WatchParent makes the sidecar exit when the process that started it exits (pidfd on Linux).
	// Default on; tests that embed a sidecar in-process turn it off with DisableParentWatch.
	DisableParentWatch bool

	// Isolation configures worker containment (cgroup parent, memory and pids limits, term grace,
	// reap bound, nofile). Zero fields take isolation's documented defaults (1 GiB, 256 pids,
	// TermGrace 10s, ReapBound 11s). WorkerPath/WorkerArgs default to this binary's worker mode.
	Isolation isolation.Config
	// DisableIsolation starts without a supervisor: index.mutate is then refused with
	// rpc.ErrIsolationUnavailable. For transport-only embedding and tests; default false.
	DisableIsolation bool
	// MemoryBudget bounds the sum of the memory limits of every worker domain that exists at once
	// (mutations, idle spares, engine probes): calls wait in the queue for it, a call
	// whose own limit exceeds it is refused at receive with rpc.ErrOverMemoryBudget. Default 0:
	// 80% of the sidecar's own cgroup memory limit when it has one below MemTotal, else 50% of
	// MemTotal, never below one Isolation.MemoryLimit the memory holds (budget.go).
	MemoryBudget int64
	// Executors is the number of workers that may run at once. Default 2.
	Executors int
	// QueueCapacity bounds admitted mutations waiting for an executor; a full queue refuses new
	// ones with rpc.ErrOverloaded. Default 16.
	QueueCapacity int
	// ClockSkew is reserved in front of every deadline for host/sidecar clock disagreement. Default 1s.
	ClockSkew time.Duration
	// MinRunnable is the least run time a mutation must be able to fund after the kill budget
	// (ClockSkew + TermGrace + ReapBound); less is refused at receive. Default 1s.
	MinRunnable time.Duration
	// DedupRetention keeps an admitted invocation id past its deadline, to catch a resend.
	// Default 10m.
	DedupRetention time.Duration
	// DedupCapacity bounds the remembered invocation ids; when full of live ids, new mutations
	// are refused with rpc.ErrOverloaded (never forgotten early). Default 65,536.
	DedupCapacity int
	// WorkerEnv is the complete environment of every worker besides isolation's own variables
	// (KEY=VALUE). Nothing of the sidecar's or host's environment is passed. Default
	// PATH=/usr/bin:/bin and LANG=C.UTF-8.
	WorkerEnv []string
	// Engines registers engines besides the built-in one (docs/ENGINE.md §1); each is probed once
	// at New, and one whose probe fails is left out (logged). Default none.
	Engines []EngineSpec
	// WorkerExecutable is the worker executable (cmd/steward-worker, built for this platform) the
	// worker image is written from, when workers re-execute this binary (Isolation.WorkerPath
	// left at its default): workers start it as they would `steward worker`. A sidecar whose
	// temp dir holds no image (tmpfs, noexec) starts them from this binary's own worker mode.
	// cmd/steward embeds it with the leanworker build tag. Default nil: the image is a copy of
	// this binary.
	WorkerExecutable []byte
	// TempDir holds the sidecar's own directory steward-<pid>-<start> (mode 0711), in which each
	// worker domain's private temp dir (its TMPDIR and HOME) is created, mode 0700, and removed
	// once the domain is reaped. The sidecar removes its directory when it closes, and at New
	// those of sidecars that no longer run (SIGKILLed). Default os.TempDir().
	TempDir string
	// TestFaults lets index.mutate carry a fault to inject (tests and the fault campaign only).
	// Default false: a request with a fault is invalid.
	TestFaults bool
	// S3Credentials are the sidecar's own S3 keys, used by a call that carries none, and only on a
	// store of AllowStores: index.resolve, index.mutate (its worker's request frame, for that
	// call's store only), custody's cleanup and recovery, objects.sweep. Read them with
	// LoadCredentialsFile or LoadCredentialsFD, never from an environment variable (a process's
	// initial environment stays readable in /proc/<pid>/environ). Never logged. Default nil: none.
	S3Credentials *rpc.Credentials
	// CredentialsSource says where S3Credentials came from, for hello: CredentialsFile or
	// CredentialsFD. Default CredentialsNone without S3Credentials, else CredentialsFile.
	CredentialsSource string
	// AllowStores are the canonical names (rpc.ParsedStore.Name, read by rpc.ParseStoreName) of
	// the s3 stores a call without per-call credentials may use; a store below an entry's prefix
	// is allowed too. A call without credentials on any other s3 store is refused with
	// ErrStoreNotAllowed (-32016). New fails on a malformed or file:// entry, and on S3Credentials
	// without any entry (the keys could never be used). Default none.
	AllowStores []string

	// StateDir holds the sidecar's durable state: the object ledger's journals (ledger-<n>.db,
	// invocation records included as ledger notes) and their lock files. Default: /var/lib/steward for root, else
	// $XDG_STATE_HOME/steward, else ~/.local/state/steward, else $TMPDIR/steward-<uid>.
	// Sidecars sharing a StateDir each lock the lowest free journal slot (up to 64), so a
	// restarted sidecar adopts the journal a killed one left behind and recovers its tickets.
	StateDir string
	// LedgerPath pins the ledger's journal to one file (its lock goes next to it, with ".lock"
	// appended); a second sidecar on the same path fails to start. Default "": a free slot in StateDir.
	LedgerPath string
	// LedgerCapacity bounds the object tickets held at once (reserved, in transfer or awaiting
	// deletion); a reservation past it is refused before any upload. Default 65,536.
	LedgerCapacity int
	// LedgerQuota bounds the tickets one invocation may hold at once (its engine's reservations),
	// so that one worker cannot take the ledger's whole capacity; a reservation past it is
	// refused and nothing of it is reserved. Default DefaultLedgerQuota (4096).
	LedgerQuota int
	// Gateway bounds each invocation's storage gateway (storage/gateway.Limits, docs/ENGINE.md
	// §4.3): bytes written (steward serve --worker-disk; default DefaultWorkerDisk), objects
	// created, request rate, the commit manifest's size and open uploads. Zero fields take the
	// gateway's defaults.
	Gateway gateway.Limits
	// MetricsListen, if set, serves the metrics.get registry at http://ADDR/metrics for a
	// Prometheus scraper (ResolveMetricsAddr: a bare port, ":PORT" and "localhost:PORT" bind
	// 127.0.0.1; any other host only as given). New fails if it cannot bind. Default "": off.
	MetricsListen string
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "steward", JSONFormat: true, Level: hclog.Info})
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = rpc.DefaultMaxFrame
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1024
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 60 * time.Second
	}
	if c.Executors <= 0 {
		c.Executors = 2
	}
	if c.QueueCapacity <= 0 {
		c.QueueCapacity = 16
	}
	if c.ClockSkew <= 0 {
		c.ClockSkew = time.Second
	}
	if c.MinRunnable <= 0 {
		c.MinRunnable = time.Second
	}
	if c.DedupRetention <= 0 {
		c.DedupRetention = 10 * time.Minute
	}
	if c.DedupCapacity <= 0 {
		c.DedupCapacity = 65536
	}
	if c.WorkerEnv == nil {
		c.WorkerEnv = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	}
	if c.TempDir == "" {
		c.TempDir = os.TempDir()
	}
	if c.Isolation.WorkerPath == "" {
		c.Isolation.WorkerPath = "/proc/self/exe"
	}
	if c.Isolation.WorkerArgs == nil {
		c.Isolation.WorkerArgs = []string{"worker"}
	}
	c.Isolation = c.Isolation.WithDefaults()
	if c.StateDir == "" {
		c.StateDir = defaultStateDir()
	}
	if c.LedgerCapacity <= 0 {
		c.LedgerCapacity = ledger.DefaultCapacity
	}
	if c.Gateway.MaxBytes <= 0 {
		c.Gateway.MaxBytes = DefaultWorkerDisk
	}
	c.Gateway = c.Gateway.WithDefaults()
	if c.LedgerQuota <= 0 {
		c.LedgerQuota = DefaultLedgerQuota
	}
	if c.CredentialsSource == "" {
		c.CredentialsSource = CredentialsNone
		if c.S3Credentials != nil {
			c.CredentialsSource = CredentialsFile
		}
	}
	return c
}
