package hostile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// statusField returns a field of /proc/<pid>/status ("" if absent).
func statusField(pid, field string) string {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// idMap is one /proc/self/uid_map or gid_map.
type idMap [][3]uint64

func readIDMap(path string) (idMap, string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err.Error()
	}
	var m idMap
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		var e [3]uint64
		for i := range e {
			e[i], _ = strconv.ParseUint(f[i], 10, 64)
		}
		m = append(m, e)
	}
	return m, strings.Join(strings.Fields(string(b)), " ")
}

// host maps an id of this namespace to the initial namespace's (ok false: unmapped).
func (m idMap) host(id uint64) (uint64, bool) {
	for _, e := range m {
		if id >= e[0] && id < e[0]+e[2] {
			return e[1] + id - e[0], true
		}
	}
	return 0, false
}

// initial reports whether the map is the initial user namespace's identity map.
func (m idMap) initial() bool {
	return len(m) == 1 && m[0] == [3]uint64{0, 0, 4294967295}
}

func (r *run) identity(_ context.Context) {
	uid, euid, _ := unix.Getresuid()
	gid, egid, _ := unix.Getresgid()
	umap, utext := readIDMap("/proc/self/uid_map")
	gmap, gtext := readIDMap("/proc/self/gid_map")
	hu, uok := umap.host(uint64(euid))
	hg, gok := gmap.host(uint64(egid))
	r.emit(Finding{Attack: "identity.host-root", Verdict: verdict(uok && hu == 0 || gok && hg == 0),
		Tried:    "getresuid/getresgid and /proc/self/{uid,gid}_map: is the engine uid or gid 0 of the host?",
		Evidence: fmt.Sprintf("uid=%d euid=%d gid=%d egid=%d; uid_map %q gid_map %q; host euid %d (mapped %v) egid %d (mapped %v)", uid, euid, gid, egid, utext, gtext, hu, uok, hg, gok)})

	capEff := statusField("self", "CapEff")
	caps, _ := strconv.ParseUint(capEff, 16, 64)
	r.emit(Finding{Attack: "identity.capabilities", Verdict: verdict(caps != 0 && umap.initial()),
		Tried:    "CapEff in /proc/self/status: does it hold capabilities in the initial user namespace?",
		Evidence: fmt.Sprintf("CapEff=%s CapBnd=%s CapAmb=%s, uid_map %q (initial namespace: %v)", capEff, statusField("self", "CapBnd"), statusField("self", "CapAmb"), utext, umap.initial())})

	r.emit(r.readShadow())
	r.emit(r.chownForeign())
	r.emit(r.raiseRlimits())
	r.emit(r.writeProcSys())
}

func (r *run) readShadow() Finding {
	const tried = "open and read /etc/shadow"
	f, err := os.Open("/etc/shadow")
	if err != nil {
		return blocked("identity.read-shadow", tried, err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	n, err := f.Read(buf)
	if n == 0 {
		return blocked("identity.read-shadow", tried, fmt.Errorf("opened, read nothing: %w", err))
	}
	return Finding{Attack: "identity.read-shadow", Tried: tried, Verdict: Succeeded,
		Evidence: fmt.Sprintf("read %d bytes, %d lines", n, strings.Count(string(buf[:n]), "\n"))}
}

func (r *run) chownForeign() Finding {
	const tried = "create a file in TMPDIR and chown it to uid 1 gid 1 (another identity of the host: daemon), then to 0:0"
	p := filepath.Join(r.tmp, "chown-probe")
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		return Finding{Attack: "identity.chown-foreign", Tried: tried, Verdict: Inconclusive, Errno: errno(err), Evidence: "cannot create the probe: " + err.Error()}
	}
	defer os.Remove(p)
	if err := unix.Chown(p, 1, 1); err != nil {
		return blocked("identity.chown-foreign", tried, err)
	}
	var st unix.Stat_t
	_ = unix.Stat(p, &st)
	back := unix.Chown(p, 0, 0)
	// Within a user namespace that maps a range, uid 1 is one of the guest's own host uids: only
	// a uid 1 that is the host's uid 1 is another identity.
	umap, _ := readIDMap("/proc/self/uid_map")
	host, _ := umap.host(1)
	return Finding{Attack: "identity.chown-foreign", Tried: tried, Verdict: verdict(st.Uid == 1 && host == 1),
		Evidence: fmt.Sprintf("chown to 1:1 returned 0, stat shows %d:%d, uid 1 is host uid %d; chown back to 0:0: %v", st.Uid, st.Gid, host, back)}
}

func (r *run) raiseRlimits() Finding {
	const tried = "setrlimit: raise the hard limit of RLIMIT_NOFILE (+1) and RLIMIT_CORE (to infinity)"
	var ev []string
	raised := false
	var lastErr error
	for _, lim := range []struct {
		name string
		res  int
		up   func(uint64) uint64
	}{
		{"NOFILE", unix.RLIMIT_NOFILE, func(h uint64) uint64 { return h + 1 }},
		{"CORE", unix.RLIMIT_CORE, func(uint64) uint64 { return unix.RLIM_INFINITY }},
	} {
		var old unix.Rlimit
		if err := unix.Getrlimit(lim.res, &old); err != nil {
			ev = append(ev, lim.name+": getrlimit "+err.Error())
			continue
		}
		want := lim.up(old.Max)
		if want == old.Max {
			ev = append(ev, fmt.Sprintf("%s: hard limit already %d", lim.name, old.Max))
			continue
		}
		err := unix.Setrlimit(lim.res, &unix.Rlimit{Cur: old.Cur, Max: want})
		var now unix.Rlimit
		_ = unix.Getrlimit(lim.res, &now)
		if err != nil {
			lastErr = err
			ev = append(ev, fmt.Sprintf("%s: hard %d → %d refused: %s", lim.name, old.Max, want, errno(err)))
			continue
		}
		ok := now.Max == want
		raised = raised || ok
		ev = append(ev, fmt.Sprintf("%s: hard %d → %d accepted, now %d", lim.name, old.Max, want, now.Max))
	}
	f := Finding{Attack: "identity.rlimit-raise", Tried: tried, Verdict: verdict(raised), Evidence: strings.Join(ev, "; ")}
	if !raised && lastErr != nil {
		f.Errno = errno(lastErr)
	}
	return f
}

func (r *run) writeProcSys() Finding {
	const p = "/proc/sys/vm/overcommit_ratio" // global, not namespaced; its own value is written back
	tried := "open " + p + " for writing and write its current value back"
	old, err := os.ReadFile(p)
	if err != nil {
		return blocked("identity.proc-sys-write", tried, err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		return blocked("identity.proc-sys-write", tried, err)
	}
	defer f.Close()
	n, err := f.Write(old)
	if err != nil {
		return blocked("identity.proc-sys-write", tried, err)
	}
	return Finding{Attack: "identity.proc-sys-write", Tried: tried, Verdict: Succeeded,
		Evidence: fmt.Sprintf("wrote %d bytes (%q) to a global sysctl", n, strings.TrimSpace(string(old)))}
}

// nsKinds are the namespaces compared with the sidecar's.
var nsKinds = []string{"mnt", "net", "pid", "user", "ipc", "uts", "cgroup"}

// nsID is the inode number of a namespace link ("net:[4026531840]" → "4026531840").
func nsID(link string) string {
	if i := strings.IndexByte(link, '['); i >= 0 {
		return strings.TrimSuffix(link[i+1:], "]")
	}
	return link
}

func (r *run) namespaces(_ context.Context) {
	theirs := map[string]string{}
	for _, kv := range strings.Split(r.p[ParamSidecarNS], ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			theirs[k] = v
		}
	}
	for _, k := range nsKinds {
		name, tried := "ns."+k, "compare /proc/self/task/*/ns/"+k+" (every thread's) with the sidecar's"
		mine, err := threadsNamespace(k, theirs[k])
		switch {
		case theirs[k] == "":
			r.emit(Finding{Attack: name, Tried: tried, Verdict: Inconclusive, Evidence: "the test named no sidecar namespace"})
		case err != nil:
			r.emit(Finding{Attack: name, Tried: tried, Verdict: Inconclusive, Errno: errno(err), Evidence: err.Error()})
		default:
			r.emit(Finding{Attack: name, Tried: tried, Verdict: verdict(nsID(mine) == theirs[k]),
				Evidence: fmt.Sprintf("mine %s, the sidecar's %s", nsID(mine), theirs[k])})
		}
	}
	r.emit(r.findSidecar())
}

// threadsNamespace returns the namespace of kind k a thread of this process shares with the
// sidecar (sidecar), if one does, else the main thread's: a namespace entered by one thread only
// (unshare and setns act on the caller) leaves the others where they were.
func threadsNamespace(k, sidecar string) (string, error) {
	main, err := os.Readlink("/proc/self/ns/" + k)
	if err != nil {
		return "", err
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return "", err
	}
	for _, task := range tasks {
		link, err := os.Readlink("/proc/self/task/" + task.Name() + "/ns/" + k)
		if err == nil && nsID(link) == sidecar {
			return link, nil
		}
	}
	return main, nil
}

// findSidecar looks for the sidecar without help: the parent process, and any `steward serve`.
func (r *run) findSidecar() Finding {
	const tried = "getppid, and scan /proc for a process running `… serve …` other than this engine's"
	var found []string
	ppid := os.Getppid()
	if argv := cmdline(ppid); len(argv) > 1 && argv[1] == "serve" {
		found = append(found, fmt.Sprintf("parent %d", ppid))
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return blocked("ns.find-sidecar", tried, err)
	}
	visible := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		visible++
		if argv := cmdline(pid); len(argv) > 1 && argv[1] == "serve" && pid != ppid {
			found = append(found, strconv.Itoa(pid))
		}
	}
	return Finding{Attack: "ns.find-sidecar", Tried: tried, Verdict: verdict(len(found) > 0),
		Evidence: fmt.Sprintf("getppid %d; %d processes visible; sidecars found: %v", ppid, visible, found)}
}

// cmdline is a process's argv (nil if unreadable).
func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}
