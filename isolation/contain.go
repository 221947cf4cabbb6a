package isolation

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// Containment says how hard worker domains are contained beyond their cgroup limits.
type Containment string

const (
	// ContainAuto (the zero value) applies every layer the kernel offers and reports the ones
	// it lacks: a guest identity in a user namespace, PID/mount/IPC/UTS/cgroup namespaces (and a
	// network namespace for domains without network), read-only mounts with the host's trees
	// hidden and a private, size-limited, noexec temp dir, Landlock, a seccomp filter and
	// no_new_privs from birth.
	ContainAuto Containment = ""
	// ContainRequire is ContainAuto that refuses to start (NewSupervisor fails with
	// ErrContainment) when any layer is missing: `steward serve --require-containment`.
	ContainRequire Containment = "require"
	// ContainOff runs workers in the supervisor's namespaces as its own uid, as steward did
	// before containment: cgroup limits, no_new_privs, no core, non-dumpable only.
	ContainOff Containment = "off"
)

// DefaultGuestID is the guest uid and gid of worker domains when the supervisor runs as root
// and Config.GuestUID is unset: "nobody". A dedicated uid (a system user no other service runs
// as) is better; see docs/PROTOCOL.md and deploy/systemd.
const DefaultGuestID = 65534

// Policy is what a contained worker may reach once Contain has run. Paths are absolute paths
// as the supervisor sees them; a path that does not exist is left out. The domain's mount
// namespace hides every host tree but the system's, and shows the trees of Spec.Policy again
// (mounts_linux.go): a path given to Contain only must lie in one of those.
type Policy struct {
	// Read lists trees the worker may read and execute from, in addition to the system's own
	// (/usr, /lib*, /bin, /sbin, /etc, /proc, a few devices): an engine's installation.
	Read []string `json:"read,omitempty"`
	// Write lists trees the worker may create, write and remove in (Landlock), in addition to
	// its private temp dir; bound writable, noexec, nosuid and nodev.
	Write []string `json:"write,omitempty"`
	// Mount lists trees bind-mounted writable into the otherwise read-only mount namespace: a
	// file:// store's root, so that a rename from its staging dir into a dataset stays on one
	// mount. Landlock still allows writing only below Write. A Write path under no Mount is
	// bind-mounted itself.
	Mount []string `json:"mount,omitempty"`
	// Exec, when not nil, lists the only files the worker may execute (an engine's resolved
	// executable and its ELF interpreter: what the trampoline's execve needs); the system's trees
	// and Read are then readable but not executable, so no shell or other program can be
	// started. nil keeps the system's trees executable (the built-in worker).
	Exec []string `json:"exec,omitempty"`
	// Connect lists the TCP ports the worker may connect to (an S3 endpoint's); Start adds
	// Spec.Gateway's. Without network (Spec.Network false) the domain has its own network
	// namespace, where only lo can be up (with a gateway) and nothing but the gateway listens.
	// TCP bind is refused for every port.
	Connect []uint16 `json:"connect,omitempty"`
}

// merge returns p with q's entries appended (duplicates dropped).
func (p Policy) merge(q Policy) Policy {
	out := Policy{
		Read:    slices.Concat(p.Read, q.Read),
		Write:   slices.Concat(p.Write, q.Write),
		Mount:   slices.Concat(p.Mount, q.Mount),
		Exec:    slices.Concat(p.Exec, q.Exec),
		Connect: slices.Concat(p.Connect, q.Connect),
	}
	for _, l := range []*[]string{&out.Read, &out.Write, &out.Mount, &out.Exec} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	slices.Sort(out.Connect)
	out.Connect = slices.Compact(out.Connect)
	return out
}

// mounts lists the trees to bind writable: every Mount, and every Write under none of them.
func (p Policy) mounts() []string {
	out := slices.Clone(p.Mount)
	for _, w := range p.Write {
		if !slices.ContainsFunc(p.Mount, func(m string) bool { return w == m || strings.HasPrefix(w, strings.TrimSuffix(m, "/")+"/") }) {
			out = append(out, w)
		}
	}
	return out
}

func (p Policy) check() error {
	for _, d := range slices.Concat(p.Read, p.Write, p.Mount, p.Exec) {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d {
			return fmt.Errorf("%w: policy path %q must be absolute and clean", ErrInvalidSpec, d)
		}
	}
	return nil
}

func (p Policy) encode() string {
	b, _ := json.Marshal(p) // strings and ints only: cannot fail
	return string(b)
}

func decodePolicy(s string) (Policy, error) {
	var p Policy
	if s == "" {
		return p, nil
	}
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return p, fmt.Errorf("%w: bad %s: %w", ErrContainment, EnvPolicy, err)
	}
	return p, p.check()
}

// ContainmentReport is what the supervisor enforces on every worker domain, layer by layer,
// as hello's isolation.containment and doctor's containment lines. Plain JSON.
type ContainmentReport struct {
	// Mode is the configured Containment ("auto", "require" or "off").
	Mode string `json:"mode"`
	// Guest is the host uid:gid the domain runs as ("65534:65534"); "" when off.
	Guest string `json:"guest,omitempty"`
	// TempDirBytes is the size of each domain's temp dir (a tmpfs) at the default memory
	// limit; 0 when off.
	TempDirBytes int64 `json:"temp_dir_bytes,omitempty"`
	// Layers lists each layer, enforced or not, with what it holds.
	Layers []Layer `json:"layers"`
}

// Layer is one containment layer.
type Layer struct {
	Name     string `json:"name"`
	Enforced bool   `json:"enforced"`
	Detail   string `json:"detail"`
}

// Missing lists the names of the layers not enforced.
func (r ContainmentReport) Missing() []string {
	var out []string
	for _, l := range r.Layers {
		if !l.Enforced {
			out = append(out, l.Name)
		}
	}
	return out
}
