package rpc

import (
	"errors"
	"fmt"
)

// Validator is implemented by params that check their own invariants after decoding. A failure is
// answered with ErrInvalidParams.
type Validator interface {
	Validate() error
}

// HelloParams opens a session.
type HelloParams struct {
	// ProtocolVersion is the version the host speaks; it must equal ProtocolVersion.
	ProtocolVersion int `json:"protocol_version"`
	// Client names the host software, for logs only.
	Client string `json:"client,omitempty"`
}

// Validate implements Validator.
func (p HelloParams) Validate() error {
	if p.ProtocolVersion <= 0 {
		return errors.New("protocol_version must be a positive integer")
	}
	if len(p.Client) > 256 {
		return errors.New("client must be at most 256 bytes")
	}
	return nil
}

// HelloResult describes the sidecar process the host is talking to.
type HelloResult struct {
	ProtocolVersion int      `json:"protocol_version"`
	Epoch           string   `json:"epoch"` // random per sidecar process start (128-bit hex)
	Pid             int      `json:"pid"`
	Version         string   `json:"version"` // build version of the steward binary
	Capabilities    []string `json:"capabilities"`
	// Isolation is the preflight report of the worker isolation (nil until the sidecar has one).
	Isolation *IsolationReport `json:"isolation,omitempty"`
	// Limits are the admission limits this sidecar enforces.
	Limits *Limits `json:"limits,omitempty"`
	// Engines are the registered engines, the built-in one first (docs/ENGINE.md).
	Engines []EngineInfo `json:"engines,omitempty"`
	// Credentials says where the sidecar's own S3 keys came from and which stores they may be
	// sent to (names only, never a key).
	Credentials *CredentialsReport `json:"credentials,omitempty"`
	// Storage says how engines reach storage: through a per-invocation gateway only.
	Storage *StorageReport `json:"storage,omitempty"`
	// MemoryBudget is admission by memory: the budget and its use.
	MemoryBudget *MemoryBudget `json:"memory_budget,omitempty"`
}

// StorageReport is hello's account of how workers reach storage (docs/ENGINE.md §4.3).
type StorageReport struct {
	// Mode is "gateway": the sidecar is the only writer; an engine reaches its dataset through
	// an S3 endpoint the sidecar serves for its invocation alone.
	Mode string `json:"mode"`
	// Reach is where the gateway listens: "domain" (127.0.0.1 in the domain's own network
	// namespace, which holds nothing else: only the domain can connect) or "loopback" (the
	// sidecar's own loopback, when workers are not contained: any local process could connect
	// with the invocation's key).
	Reach string `json:"reach"`
	// Endpoint is the address an engine dials, as its request names it (domain reach).
	Endpoint string `json:"endpoint,omitempty"`
	// WorkerDiskBytes bounds the bytes one invocation writes (--worker-disk).
	WorkerDiskBytes int64 `json:"worker_disk_bytes"`
	// WorkerObjects bounds the objects one invocation creates.
	WorkerObjects int `json:"worker_objects"`
	// RequestsPerSecond bounds one invocation's request rate (burst: twice it).
	RequestsPerSecond float64 `json:"requests_per_second"`
}

// CredentialsReport is hello's account of the sidecar's own S3 credentials.
type CredentialsReport struct {
	// Source is "file" (--s3-credentials-file), "fd" (--s3-credentials-fd) or "none".
	Source string `json:"source"`
	// AllowStores are the canonical names (ParsedStore.Name) of the stores the sidecar's own keys
	// are sent to; a store below an entry's prefix is allowed too.
	AllowStores []string `json:"allow_stores"`
}

// EngineInfo is one registered engine as its probe's hello declared it.
type EngineInfo struct {
	Name       string   `json:"name"`        // the registered name, what index.mutate's engine selects
	Protocol   int      `json:"protocol"`    // engine protocol version (1)
	IndexTypes []string `json:"index_types"` // the index.type values it builds
	// Settle is how an UNKNOWN outcome of this engine settles: SettleFence, SettleClaimFence or
	// SettleNone.
	Settle string `json:"settle"`
	// IdleMemoryBytes is the peak memory of this engine's last idle prestarted worker, read
	// when its start-up was done (frozen, or taken by a call); 0 until one has been.
	IdleMemoryBytes int64 `json:"idle_memory_bytes,omitempty"`
}

// Settle guarantees of an engine (EngineInfo.Settle): what index.resolve can do for it.
const (
	// SettleFence: index.resolve settles UNKNOWN by fencing the slot against every writer.
	SettleFence = "fence"
	// SettleClaimFence: as SettleFence among steward's writers; a non-steward writer committing
	// the same version in the engine's check-then-write window can be overwritten.
	SettleClaimFence = "claim-fence"
	// SettleNone: no fencing; index.resolve cannot settle, UNKNOWN is left to a person.
	SettleNone = "none"
)

// IsolationReport is the wire form of the worker-isolation preflight.
type IsolationReport struct {
	Mode        string           `json:"mode"` // "v2", "hybrid", "v1" or "none"
	Verified    bool             `json:"verified"`
	Reason      string           `json:"reason,omitempty"` // why nothing verified
	Controllers []string         `json:"controllers,omitempty"`
	Limits      map[string]int64 `json:"limits,omitempty"` // limits read back from the probe cgroup
	// Cgroups are the sidecar's own cgroup directories (<root>/<parent>/<pid>-<start>), one per
	// hierarchy in use; each worker domain is a directory below each of them.
	Cgroups []string `json:"cgroups,omitempty"`
	// Parent says under which cgroups the worker domains live and why.
	Parent *IsolationParent `json:"parent,omitempty"`
	// Checks are the requirements of isolation, each ok or missing with what to do (the lines
	// `steward doctor` prints).
	Checks []IsolationCheck `json:"checks,omitempty"`
	// Containment is what every worker domain is held by beyond its cgroups.
	Containment *Containment `json:"containment,omitempty"`
	// DomainLimits lists each limit and setting written into every worker domain's cgroups
	// (memory, swap off, swappiness, oom group, pids), read back after the write, and whether
	// this mode enforces it (docs/PROTOCOL.md §2.1).
	DomainLimits []DomainLimit `json:"domain_limits,omitempty"`
}

// DomainLimit is one limit of every worker domain: the file written, the value read back, and
// whether it is enforced (when not, Detail says what the kernel lacks and what holds instead).
type DomainLimit struct {
	Name     string `json:"name"`
	File     string `json:"file,omitempty"`
	Value    int64  `json:"value"`
	Enforced bool   `json:"enforced"`
	Detail   string `json:"detail,omitempty"`
}

// MemoryBudget is hello's account of admission by memory: the memory limits of every running
// worker domain (mutations and prestarted spares) never sum above BudgetBytes.
type MemoryBudget struct {
	// BudgetBytes is the budget (--memory-budget, or its default).
	BudgetBytes int64 `json:"budget_bytes"`
	// InUseBytes is the sum of the memory limits of the domains that hold budget now.
	InUseBytes int64 `json:"in_use_bytes"`
	// SparesBytes is the part of InUseBytes held by idle prestarted spares (retired first when
	// a call needs it).
	SparesBytes int64 `json:"spares_bytes"`
	// Waiting counts the calls waiting for budget now.
	Waiting int `json:"waiting"`
	// Source says where the budget came from: "flag", or the default's base: "cgroup" (the
	// sidecar's own cgroup memory limit) or "machine" (MemTotal).
	Source string `json:"source"`
	// BaseBytes is the memory the default was taken from (0 for "flag").
	BaseBytes int64 `json:"base_bytes,omitempty"`
	// Share is the fraction of BaseBytes the default is (0 for "flag").
	Share float64 `json:"share,omitempty"`
	// Detail names the cgroup file or /proc/meminfo the base was read from.
	Detail string `json:"detail,omitempty"`
}

// Containment is the wire form of the containment layers (isolation.ContainmentReport).
type Containment struct {
	Mode   string             `json:"mode"`            // "auto", "require" or "off"
	Guest  string             `json:"guest,omitempty"` // host uid:gid of the workers; "" when not contained
	Layers []ContainmentLayer `json:"layers"`
}

// ContainmentLayer is one layer: enforced or not, and what it holds.
type ContainmentLayer struct {
	Name     string `json:"name"`
	Enforced bool   `json:"enforced"`
	Detail   string `json:"detail"`
}

// IsolationParent is the cgroup parent of the worker domains.
type IsolationParent struct {
	Source string   `json:"source"`         // "configured" (--cgroup-parent NAME) or "delegated" (auto)
	Dirs   []string `json:"dirs,omitempty"` // the parent directory in each hierarchy in use
	Leaf   []string `json:"leaf,omitempty"` // the leaf cgroups the sidecar moved itself into (auto)
	Why    []string `json:"why,omitempty"`  // per hierarchy, why this parent (or why none)
}

// IsolationCheck is one requirement of worker isolation.
type IsolationCheck struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Detail   string `json:"detail,omitempty"`
	Fix      string `json:"fix,omitempty"`
	Optional bool   `json:"optional,omitempty"` // missing costs a better mode, not isolation
}

// Limits are the bounds a sidecar applies; hosts use them to size requests.
type Limits struct {
	MaxFrameBytes   int   `json:"max_frame_bytes"`
	QueueCapacity   int   `json:"queue_capacity,omitempty"`
	ExecutorSlots   int   `json:"executor_slots,omitempty"`
	KillBudgetMs    int64 `json:"kill_budget_ms,omitempty"`
	MinRunnableMs   int64 `json:"min_runnable_ms,omitempty"`
	WorkerMemoryMax int64 `json:"worker_memory_max,omitempty"`
	WorkerPidsMax   int64 `json:"worker_pids_max,omitempty"`
	LedgerCapacity  int   `json:"ledger_capacity,omitempty"`
	// LedgerQuota bounds the tickets one invocation's engine may hold at once.
	LedgerQuota int `json:"ledger_quota,omitempty"`
}

// ShutdownParams asks the sidecar to stop gracefully.
type ShutdownParams struct {
	// Reason is logged by the sidecar.
	Reason string `json:"reason,omitempty"`
}

// Validate implements Validator.
func (p ShutdownParams) Validate() error {
	if len(p.Reason) > 1024 {
		return fmt.Errorf("reason is %d bytes, at most 1024 allowed", len(p.Reason))
	}
	return nil
}

// ShutdownResult acknowledges a shutdown; the sidecar exits 0 after in-flight calls finish.
type ShutdownResult struct {
	InFlight int `json:"in_flight"` // calls still running when the shutdown was accepted
}

// MetricsParams selects the exposition format.
type MetricsParams struct {
	// Format is "text" (Prometheus text exposition 0.0.4, the default).
	Format string `json:"format,omitempty"`
}

// Validate implements Validator.
func (p MetricsParams) Validate() error {
	if p.Format != "" && p.Format != "text" {
		return fmt.Errorf("format %q is not supported (want \"text\")", p.Format)
	}
	return nil
}

// MetricsResult carries the exposition.
type MetricsResult struct {
	ContentType string `json:"content_type"`
	Text        string `json:"text"`
}
