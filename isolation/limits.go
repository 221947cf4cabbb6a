package isolation

// DomainLimit is one limit or setting written into every worker domain's cgroups, as the
// preflight's probe domain found it: written, then read back. A limit that does not read back
// as written fails the domain's start (ErrLimitMismatch); one the kernel does not offer is
// listed with Enforced false and Detail saying what holds instead (the documented weaker state).
type DomainLimit struct {
	// Name of the limit: "memory", "swap off", "swappiness", "oom group", "pids".
	Name string `json:"name"`
	// File is the cgroup interface file written ("memory.max", "memory.memsw.limit_in_bytes"),
	// empty when the mode has none for it.
	File string `json:"file,omitempty"`
	// Value is what the file read back after the write (-1 for "max"); 0 when not written.
	Value int64 `json:"value"`
	// Enforced: the setting holds in every domain (written and read back, or nothing to bound:
	// swap off on a machine without swap).
	Enforced bool `json:"enforced"`
	// Detail says how it was verified, or what the kernel lacks and what holds instead.
	Detail string `json:"detail,omitempty"`
}

// Names of the domain limits (DomainLimit.Name).
const (
	LimitMemory     = "memory"
	LimitSwapOff    = "swap off"
	LimitSwappiness = "swappiness"
	LimitOOMGroup   = "oom group"
	LimitPids       = "pids"
)

// MemoryCeiling is the memory this process may use: the lowest memory limit on the path of its
// own cgroup (v2 memory.max, v1 memory.limit_in_bytes, read at its cgroup and every ancestor up
// to the hierarchy's root), or the machine's MemTotal when no limit is lower.
type MemoryCeiling struct {
	// Bytes is the ceiling.
	Bytes int64
	// Source is "cgroup" (a cgroup limit is lower than MemTotal) or "machine" (MemTotal).
	Source string
	// Detail names the file the ceiling was read from.
	Detail string
}

// Sources of a MemoryCeiling.
const (
	CeilingCgroup  = "cgroup"
	CeilingMachine = "machine"
)
