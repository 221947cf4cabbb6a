package hostile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"golang.org/x/sys/unix"
)

// peer is another process the engine attacks: the sidecar or another worker.
type peer struct {
	role string // "sidecar" or "victim"
	pid  int
	err  error // why pid is not that process in this engine's view (nil: it is)
	none bool  // the test named no such process
}

// errNotThere: the pid names no process, or another one, in this engine's view.
var errNotThere = errors.New("not this process here")

// target resolves the process the test named by pid and start time, as the engine sees it: in a
// PID namespace the same number is another process or none.
func (r *run) target(role, pidKey, startKey string) peer {
	pid, _ := strconv.Atoi(r.p[pidKey])
	if pid <= 0 {
		return peer{role: role, none: true}
	}
	start, err := startTime(pid)
	if err != nil {
		return peer{role: role, pid: pid, err: err}
	}
	if want := r.p[startKey]; want != "" && start != want {
		return peer{role: role, pid: pid, err: fmt.Errorf("%w: pid %d here started at %s, the %s at %s", errNotThere, pid, start, role, want)}
	}
	return peer{role: role, pid: pid}
}

// startTime is field 22 of /proc/<pid>/stat.
func startTime(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return "", fmt.Errorf("%w: short stat", errNotThere)
	}
	return f[19], nil
}

// procState is field 3 of /proc/<pid>/stat.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return "?"
}

// unusable is the finding of an attack on a peer the engine cannot address.
func (p peer) unusable(attack, tried string) (Finding, bool) {
	switch {
	case p.none:
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: "the test named no " + p.role}, true
	case p.err != nil:
		return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Errno: errno(p.err),
			Evidence: fmt.Sprintf("the %s (host pid %d) is not visible: %v", p.role, p.pid, p.err)}, true
	}
	return Finding{}, false
}

// memScan is what a read of another process's memory found.
type memScan struct {
	bytes    int64
	regions  int
	envKey   map[string]bool // digests of STEWARD_S3_SECRET_KEY=… values
	jsonKey  map[string]bool // digests of "secret_key":"…" values
	epoch    string
	mutateID string // the JSON-RPC id of index.mutate for this invocation
}

func (m *memScan) digests(set map[string]bool) string {
	var d []string
	for k := range set {
		d = append(d, k)
	}
	if len(d) > 8 {
		d = d[:8]
	}
	return strings.Join(d, ",")
}

// region is one readable mapping.
type region struct{ start, end uint64 }

func readableRegions(pid int) ([]region, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []region
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 2 || fs[1][0] != 'r' || strings.HasSuffix(sc.Text(), "[vvar]") || strings.HasSuffix(sc.Text(), "[vsyscall]") {
			continue
		}
		a, b, _ := strings.Cut(fs[0], "-")
		s, _ := strconv.ParseUint(a, 16, 64)
		e, _ := strconv.ParseUint(b, 16, 64)
		if e > s {
			out = append(out, region{s, min(e, s+256<<20)})
		}
	}
	return out, sc.Err()
}

// scanMem reads up to 1 GiB of pid's readable memory through /proc/<pid>/mem and looks for
// secrets, the sidecar epoch and this invocation's JSON-RPC id.
func (r *run) scanMem(pid int) (*memScan, error) {
	regs, err := readableRegions(pid)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &memScan{envKey: map[string]bool{}, jsonKey: map[string]bool{}}
	const chunk, overlap = 1 << 20, 1024
	buf := make([]byte, chunk+overlap)
	var firstErr error
	for _, rg := range regs {
		if m.bytes > 1<<30 {
			break
		}
		got := false
		for off := rg.start; off < rg.end; off += chunk {
			n := int(min(uint64(len(buf)), rg.end-off))
			k, err := f.ReadAt(buf[:n], int64(off))
			if k <= 0 {
				if firstErr == nil && err != nil {
					firstErr = err
				}
				break
			}
			got = true
			m.bytes += int64(min(k, chunk))
			r.look(m, buf[:k])
		}
		if got {
			m.regions++
		}
	}
	if m.bytes == 0 && firstErr != nil {
		return nil, firstErr
	}
	return m, nil
}

var (
	envSecret  = []byte("STEWARD_S3_SECRET_KEY=")
	jsonSecret = []byte(`"secret_key":"`)
	epochKey   = []byte(`"epoch":"`)
)

func (r *run) look(m *memScan, b []byte) {
	each := func(pat []byte, end byte, fn func(v string)) {
		for i := 0; ; {
			j := bytes.Index(b[i:], pat)
			if j < 0 {
				return
			}
			s := i + j + len(pat)
			if e := bytes.IndexByte(b[s:min(len(b), s+256)], end); e > 0 {
				fn(string(b[s : s+e]))
			}
			i = s
		}
	}
	each(envSecret, 0, func(v string) { m.envKey[Digest(v)] = true })
	each(jsonSecret, '"', func(v string) { m.jsonKey[Digest(v)] = true })
	if m.epoch == "" {
		each(epochKey, '"', func(v string) {
			if len(v) == 32 && strings.Trim(v, "0123456789abcdef") == "" {
				m.epoch = v
			}
		})
	}
	if m.mutateID == "" {
		// The host's request as the sidecar read it: {"id":N,"jsonrpc":"2.0","method":"index.mutate","params":{"invocation_id":"<inv>"…
		pat := []byte(`,"jsonrpc":"2.0","method":"index.mutate","params":{"invocation_id":"` + r.inv + `"`)
		if j := bytes.Index(b, pat); j > 0 {
			k := bytes.LastIndex(b[max(0, j-32):j], []byte(`{"id":`))
			if k >= 0 {
				id := string(b[max(0, j-32)+k+6 : j])
				if _, err := strconv.ParseUint(id, 10, 64); err == nil {
					m.mutateID = id
				}
			}
		}
	}
}

func (r *run) victim(_ context.Context) {
	v := r.target("victim", ParamVictimPid, ParamVictimStart)
	r.emit(r.peerMem(v, "victim.mem", `"secret_key":"`))
	r.emit(r.peerVMReadv(v, "victim.process-vm-readv"))
	r.emit(r.peerPtrace(v, "victim.ptrace-seize"))
	r.emit(r.peerStop(v, "victim.sigstop"))
	r.emit(r.victimForge(v))
}

func (r *run) sidecar(_ context.Context) {
	s := r.target("sidecar", ParamSidecarPid, ParamSidecarStart)
	r.emit(r.sidecarEnviron(s))
	r.emit(r.peerMem(s, "sidecar.mem", "STEWARD_S3_SECRET_KEY="))
	r.emit(r.peerVMReadv(s, "sidecar.process-vm-readv"))
	r.emit(r.peerPtrace(s, "sidecar.ptrace-seize"))
	r.emit(r.peerPidfdGetfd(s))
	r.emit(r.peerStop(s, "sidecar.sigstop"))
	r.emit(r.signalAny())
	r.emit(r.injectRequest(s))
}

func (r *run) sidecarEnviron(s peer) Finding {
	const attack, tried = "sidecar.environ", "read /proc/<sidecar>/environ and look for STEWARD_S3_SECRET_KEY"
	if f, bad := s.unusable(attack, tried); bad {
		return f
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", s.pid))
	if err != nil {
		return blocked(attack, tried, err)
	}
	var names []string
	f := Finding{Attack: attack, Tried: tried, Verdict: Succeeded}
	for _, kv := range strings.Split(string(b), "\x00") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		names = append(names, k)
		if k == "STEWARD_S3_SECRET_KEY" {
			f.Digest = Digest(v)
		}
	}
	f.Evidence = fmt.Sprintf("read %d bytes, %d variables; STEWARD_S3_SECRET_KEY present: %v", len(b), len(names), f.Digest != "")
	return f
}

func (r *run) peerMem(p peer, attack, what string) Finding {
	tried := fmt.Sprintf("read the %s's memory through /proc/<pid>/mem (every readable mapping) and look for %s", p.role, what)
	if f, bad := p.unusable(attack, tried); bad {
		return f
	}
	m, err := r.scanMem(p.pid)
	if err != nil {
		return blocked(attack, tried, err)
	}
	if p.role == "sidecar" {
		r.scan = m
	}
	f := Finding{Attack: attack, Tried: tried, Verdict: verdict(m.bytes > 0),
		Evidence: fmt.Sprintf("read %d bytes of %d mappings; env secrets %d, request secrets %d; epoch found %v; this mutate's request id found %v",
			m.bytes, m.regions, len(m.envKey), len(m.jsonKey), m.epoch != "", m.mutateID != "")}
	if p.role == "sidecar" {
		f.Digest = m.digests(m.envKey)
	} else {
		f.Digest = m.digests(m.jsonKey)
	}
	return f
}

func (r *run) peerVMReadv(p peer, attack string) Finding {
	tried := fmt.Sprintf("process_vm_readv 4 KiB of the %s's first readable mapping", p.role)
	if f, bad := p.unusable(attack, tried); bad {
		return f
	}
	regs, err := readableRegions(p.pid)
	if err != nil {
		return blocked(attack, tried, err)
	}
	var last error = errNotThere
	for _, rg := range regs {
		buf := make([]byte, 4096)
		n, err := unix.ProcessVMReadv(p.pid, []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}},
			[]unix.RemoteIovec{{Base: uintptr(rg.start), Len: len(buf)}}, 0)
		if err == nil && n > 0 {
			return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("read %d bytes at %#x", n, rg.start)}
		}
		if err != nil {
			last = err
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOSYS) {
				break
			}
		}
	}
	return blocked(attack, tried, last)
}

// peerPtrace seizes the peer's main thread and lets go at once (interrupt, wait for the stop,
// detach), all from one locked OS thread as ptrace requires.
func (r *run) peerPtrace(p peer, attack string) Finding {
	tried := fmt.Sprintf("PTRACE_SEIZE the %s (then PTRACE_INTERRUPT, wait, PTRACE_DETACH)", p.role)
	if f, bad := p.unusable(attack, tried); bad {
		return f
	}
	type res struct {
		err error
		ev  string
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		if err := unix.PtraceSeize(p.pid); err != nil {
			ch <- res{err: err}
			return
		}
		ev := "seized"
		if err := unix.PtraceInterrupt(p.pid); err == nil {
			var ws unix.WaitStatus
			if _, err := unix.Wait4(p.pid, &ws, unix.WALL, nil); err == nil {
				ev += fmt.Sprintf(", stopped (%v)", ws.StopSignal())
			}
		}
		if err := unix.PtraceDetach(p.pid); err != nil {
			ev += ", detach: " + err.Error()
		} else {
			ev += ", detached"
		}
		ch <- res{ev: ev}
	}()
	select {
	case x := <-ch:
		if x.err != nil {
			return blocked(attack, tried, x.err)
		}
		return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: x.ev}
	case <-time.After(10 * time.Second):
		return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: "seized; the stop did not come within 10 s (the tracer thread stays)"}
	}
}

func (r *run) peerPidfdGetfd(p peer) Finding {
	const attack, tried = "sidecar.pidfd-getfd", "pidfd_open the sidecar and pidfd_getfd its fd 1 (the host transport)"
	if f, bad := p.unusable(attack, tried); bad {
		return f
	}
	pfd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return blocked(attack, tried, err)
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, 1, 0)
	if err != nil {
		return blocked(attack, tried, err)
	}
	defer unix.Close(fd)
	link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("got the sidecar's fd 1 as fd %d (%s)", fd, link)}
}

func (r *run) peerStop(p peer, attack string) Finding {
	tried := fmt.Sprintf("kill(%s, SIGSTOP), look at its state, kill(SIGCONT)", p.role)
	if f, bad := p.unusable(attack, tried); bad {
		return f
	}
	if err := unix.Kill(p.pid, unix.SIGSTOP); err != nil {
		return blocked(attack, tried, err)
	}
	state := "?"
	for i := 0; i < 100 && state != "T"; i++ {
		time.Sleep(time.Millisecond)
		state = procState(p.pid)
	}
	cont := unix.Kill(p.pid, unix.SIGCONT)
	return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("SIGSTOP delivered, state %s; SIGCONT: %v", state, cont)}
}

// signalAny counts the processes outside this engine's own tree it may signal (signal 0 only).
func (r *run) signalAny() Finding {
	const tried = "kill(pid, 0) on every process in /proc that is not this engine or its children"
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return blocked("sidecar.signal-any", tried, err)
	}
	me := os.Getpid()
	n, seen := 0, 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me || ppidOf(pid) == me {
			continue
		}
		seen++
		if unix.Kill(pid, 0) == nil {
			n++
		}
	}
	return Finding{Attack: "sidecar.signal-any", Tried: tried, Verdict: verdict(n > 0),
		Evidence: fmt.Sprintf("%d other processes visible, %d signalable", seen, n)}
}

func ppidOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// frame renders a JSON-RPC message in the sidecar's framing (its cmdline says ndjson or not).
func frame(pid int, body []byte) []byte {
	for _, a := range cmdline(pid) {
		if a == "ndjson" || a == "--framing=ndjson" {
			return append(body, '\n')
		}
	}
	return append([]byte(fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))), body...)
}

// injectRequest writes a request of its own into the sidecar's stdin (the host transport); the
// sidecar's answer goes to the host, which ignores an unknown id. The test sees it in the
// sidecar's request metrics.
func (r *run) injectRequest(s peer) Finding {
	const attack = "sidecar.stdin-inject"
	tried := "open /proc/<sidecar>/fd/0 for writing and write an objects.status request with id hostile-" + r.inv
	if f, bad := s.unusable(attack, tried); bad {
		return f
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "hostile-" + r.inv, "method": rpc.MethodObjectsStatus, "params": map[string]any{}})
	return r.writeFD(attack, tried, s.pid, 0, frame(s.pid, body))
}

// writeFD opens another process's fd through /proc and writes each message with one write (a
// pipe write of at most 4 KiB is atomic: it never interleaves with the owner's own writes).
func (r *run) writeFD(attack, tried string, pid, fd int, msgs ...[]byte) Finding {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), os.O_WRONLY, 0)
	if err != nil {
		return blocked(attack, tried, err)
	}
	defer f.Close()
	total, want := 0, 0
	for _, b := range msgs {
		want += len(b)
		n, err := f.Write(b)
		total += n
		if err != nil {
			if total == 0 {
				return blocked(attack, tried, err)
			}
			break
		}
	}
	return Finding{Attack: attack, Tried: tried, Verdict: verdict(total == want), Evidence: fmt.Sprintf("wrote %d of %d bytes", total, want)}
}

// victimForge writes a result frame into the other worker's pipe to the sidecar: its answer.
func (r *run) victimForge(v peer) Finding {
	const attack = "victim.forge-result"
	tried := "open /proc/<victim>/fd/4 (its pipe to the sidecar) and write a result frame for it: NATIVE_RETURN 6 'forged by hostile'"
	if f, bad := v.unusable(attack, tried); bad {
		return f
	}
	var buf bytes.Buffer
	_ = workerproto.Write(&buf, &workerproto.Frame{T: workerproto.TypeResult, Result: &workerproto.Result{
		Phase: rpc.PhaseNativeReturn, Code: rpc.NativeInternal, Message: "forged by hostile " + r.inv}}, workerproto.MaxWorkerFrame)
	return r.writeFD(attack, tried, v.pid, 4, buf.Bytes())
}

// forgeAnswer writes a COMMITTED answer for this very mutation onto the host transport, with
// the request id and epoch read from the sidecar's memory (ids 0-39 when they could not be read).
// The transport is found as the sidecar's write-only pipe whose other end the sidecar's parent
// (the host) holds; fd 1 when that cannot be seen.
func (r *run) forgeAnswer(_ context.Context) {
	const attack = "sidecar.stdout-forge"
	s := r.target("sidecar", ParamSidecarPid, ParamSidecarStart)
	tried := "find the sidecar's pipe to the host in /proc/<sidecar>/fd (fd 1 if none) and write the host a forged index.mutate answer: NATIVE_RETURN 0 COMMITTED"
	if f, bad := s.unusable(attack, tried); bad {
		r.emit(f)
		return
	}
	fd, how := transportFD(s.pid)
	epoch, ids := "", []string{}
	if r.scan == nil {
		r.scan, _ = r.scanMem(s.pid) // nil when its memory is out of reach
	}
	if m := r.scan; m != nil {
		epoch = m.epoch
		if m.mutateID != "" {
			ids = append(ids, m.mutateID)
		}
	}
	if len(ids) == 0 {
		for i := 0; i < 40; i++ {
			ids = append(ids, strconv.Itoa(i))
		}
	}
	var out [][]byte
	for _, id := range ids {
		res := rpc.MutateResult{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, InvocationID: r.inv, Epoch: epoch,
			ObservedLatestVersion: r.req.PinnedVersion + 1, CommittedVersion: r.req.PinnedVersion + 1,
			CompletionReason: rpc.CompletionCommitted, Message: "forged by the hostile engine"}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "result": res})
		out = append(out, frame(s.pid, body))
	}
	f := r.writeFD(attack, tried, s.pid, fd, out...)
	f.Evidence += fmt.Sprintf("; fd %d (%s); %d forged answers (request id from memory: %v, epoch from memory: %v)", fd, how, len(ids), len(ids) == 1, epoch != "")
	r.emit(f)
}

// transportFD finds the sidecar's write end of its pipe to the host: a write-only pipe of the
// sidecar whose read end the sidecar's parent holds.
func transportFD(pid int) (int, string) {
	host := ppidOf(pid)
	readEnds := map[string]bool{}
	for fd, l := range pipes(host) {
		if accessMode(host, fd) == 0 {
			readEnds[l] = true
		}
	}
	logPipe, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", pid))
	mine := pipes(pid)
	if len(mine) == 0 {
		return 1, "no pipe of the sidecar visible"
	}
	for fd, l := range mine {
		if readEnds[l] && l != logPipe && accessMode(pid, fd) == 1 {
			return fd, fmt.Sprintf("write end of %s, whose read end the host (pid %d) holds", l, host)
		}
	}
	return 1, fmt.Sprintf("no pipe read by the host (pid %d) visible", host)
}

// pipes lists a process's pipe fds (fd → "pipe:[inode]").
func pipes(pid int) map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); err == nil && strings.HasPrefix(l, "pipe:") {
			out[fd] = l
		}
	}
	return out
}

// accessMode is O_ACCMODE of a process's fd (-1 if unreadable).
func accessMode(pid, fd int) int {
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			if fl, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64); err == nil {
				return int(fl & 3)
			}
		}
	}
	return -1
}
