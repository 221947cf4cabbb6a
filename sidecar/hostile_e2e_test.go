package sidecar_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/hostile"
	"github.com/cba1309c/steward/internal/testminio"
	"github.com/cba1309c/steward/internal/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// hostileTickets is the ledger capacity of the hostile test's sidecar and the tickets the engine
// tries to take; taking hostileTicketsGoal of them counts as taking them all (the others hold a
// few). A per-invocation quota below the goal blocks the attack (--ledger-quota, 4096 by default
// once it exists).
const (
	hostileTickets     = 8192
	hostileTicketsGoal = 8000
)

// TestHostileEngine runs internal/hostile — an engine of the public protocol that attacks its
// containment instead of building an index — through a real sidecar (root, real cgroups), on a
// file:// store and on MinIO, next to a second worker mid-mutation (its victim). It fails if any
// attack succeeds, if any answer is not true (a COMMITTED without a commit, a forged answer), or
// if a process, file or cgroup of the engine is left behind; it logs the attack table for the
// issue note (issue #13 item 8).
func TestHostileEngine(t *testing.T) {
	bin := buildHostile(t)
	for _, kind := range []string{"file", "minio"} {
		t.Run(kind, func(t *testing.T) { runHostile(t, bin, kind == "minio") })
	}
}

// buildHostile builds the engine into a world-readable directory (a guest uid must be able to
// exec it), removed at cleanup.
func buildHostile(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "steward-hostile-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hostile")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../internal/hostile/cmd/hostile")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build hostile engine: %v\n%s", err, out)
	}
	return bin
}

// hostileRun is one store's run: the sidecar, its store, and what the test planted.
type hostileRun struct {
	t       *testing.T
	e       *sidecarEnv
	st      storage.Store
	store   rpc.StoreSpec
	onMinIO bool
	bucket  string // MinIO: the test's bucket, on the sidecar's --allow-store list
	tmp     string // the sidecar's TMPDIR

	sidecarSecret, victimSecret, credFile string
	existing                              map[string]string // reservation attack name → existing key

	mu    sync.Mutex
	heard []string // lines the test's TCP listener received
}

func runHostile(t *testing.T, bin string, onMinIO bool) {
	h := &hostileRun{t: t, onMinIO: onMinIO, tmp: t.TempDir(), existing: map[string]string{}}
	// Registered before the sidecar starts, so it runs after the sidecar exited: an escaped
	// process killed earlier (killSurvivors) is a zombie of the sidecar until then.
	t.Cleanup(h.removeLeftovers)
	noTempDirsLeft(t, h.tmp)
	stateDir, hostDir := t.TempDir(), t.TempDir()
	env := append(os.Environ(), "TMPDIR="+h.tmp)
	var callCreds *rpc.Credentials
	// The sidecar's own keys come from its credentials file (never its environment), for the
	// test's bucket only (--allow-store); the hostile engine tries to read that file.
	own := rpc.Credentials{AccessKey: "hostile-test"}
	var allow []string
	if onMinIO {
		srv := testminio.Shared(t)
		h.sidecarSecret, h.victimSecret = srv.SecretKey, srv.SecretKey
		own = rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
		callCreds = &rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
		h.bucket = strings.ToLower(randID("hostile-"))
		allow = []string{"--allow-store", "s3://" + h.bucket + "@" + srv.Endpoint}
	} else {
		h.sidecarSecret, h.victimSecret = randID("sidecar-secret-"), randID("victim-secret-")
		own.SecretKey = h.sidecarSecret
		// Keys need a store to go to; this one is never used: they sit in the sidecar only.
		allow = []string{"--allow-store", "s3://hostile-unused@127.0.0.1:9"}
		callCreds = &rpc.Credentials{AccessKey: "hostile-call", SecretKey: randID("call-secret-")}
	}
	h.credFile = testsidecar.CredentialsFile(t, own, 0)
	args := append([]string{"--state-dir", stateDir, "--ledger-capacity", fmt.Sprint(hostileTickets),
		"--engine", "hostile=" + bin, "--s3-credentials-file", h.credFile}, allow...)
	h.e = newSidecarWithEnv(t, env, args...)
	t.Cleanup(killSurvivors) // runs before the sidecar's own leftover check
	h.openStore(onMinIO)
	for _, ds := range []string{"ds", "other", "victim"} {
		if _, _, err := dataset.Create(context.Background(), h.st, ds, dataset.NewGenerator(200, 7), dataset.WriteOptions{RowsPerFragment: 100}); err != nil {
			t.Fatalf("create %s: %v", ds, err)
		}
	}
	h.existing["foreign-manifest"] = h.firstKey("other/_versions/")
	h.existing["foreign-data"] = h.firstKey("other/data/")
	h.existing["own-manifest"] = h.firstKey("ds/_versions/")
	h.existing["own-data"] = h.firstKey("ds/data/")
	listen := h.listen()

	victimInv, victimPid, victimDone := h.startVictim(onMinIO)
	victimNNP := threadsNNP(victimPid)
	sc := h.e.c.Pid()
	params := map[string]string{
		hostile.ParamSidecarPid: fmt.Sprint(sc), hostile.ParamSidecarStart: statStart(t, sc), hostile.ParamSidecarNS: nsIDs(t, sc),
		hostile.ParamVictimPid: fmt.Sprint(victimPid), hostile.ParamVictimStart: statStart(t, victimPid),
		hostile.ParamListen: listen, hostile.ParamStateDir: stateDir, hostile.ParamCredFile: h.credFile, hostile.ParamHostDir: hostDir,
		hostile.ParamTickets: fmt.Sprint(hostileTickets), hostile.ParamTicketsGoal: fmt.Sprint(hostileTicketsGoal),
	}
	var parts []string
	for name, key := range h.existing {
		parts = append(parts, name+"="+key)
	}
	slices.Sort(parts)
	params[hostile.ParamExisting] = strings.Join(parts, ";")
	if !onMinIO {
		params[hostile.ParamOtherDir] = filepath.Join(h.e.root, "other")
		params[hostile.ParamStoreRoot] = h.e.root
	}
	injectedBefore := h.requests(rpc.MethodObjectsStatus)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Three invocations: every attack but the forged host answer, whose real answer is judged (a
	// claimed commit that never happened); then the forged answer alone (once the host takes a
	// forgery, the real answer is never seen); then a claim that the engine's settle confirms.
	var invs []string
	mutate := func(only, prefix string) (rpc.MutateResult, error) {
		inv := randID(prefix)
		invs = append(invs, inv)
		p := h.e.params(inv, "ds", 1, rpc.OpCreate, "ix", "name", hostile.IndexType)
		params[hostile.ParamOnly] = only
		p.Dataset.Store, p.Engine, p.Credentials, p.Index.Params = h.store, "hostile", callCreds, params
		p.DeadlineUnixMs = time.Now().Add(3 * time.Minute).UnixMilli()
		return h.e.c.Mutate(ctx, p)
	}
	res, mutErr := mutate("identity,ns,victim,sidecar,cgroup,process,nnp,seccomp,fs,net,custody", "hostile-")
	findings := h.waitReport(invs[0])
	injected := h.requests(rpc.MethodObjectsStatus) - injectedBefore
	h.waitDomainGone(invs[0])
	survivors := markerProcesses(hostile.MarkerPrefix + invs[0])
	victimRes := h.stopVictim(victimInv, victimPid, victimDone)
	h.waitCustody()
	after := h.judge(findings, judgeFacts{res: res, mutErr: mutErr, survivors: survivors, injected: injected, victim: victimRes})
	after = append(after, victimNNP)

	// The forged answer alone, then a claim whose settle lies (hostile.LiarMarker in the id).
	results, errs := []rpc.MutateResult{res}, []error{mutErr}
	for _, run := range []struct{ only, prefix, attack string }{
		{"forge", "hostile-", "sidecar.stdout-forge"},
		{"liar", "hostile" + hostile.LiarMarker, "settle.lie"},
	} {
		r, err := mutate(run.only, run.prefix)
		inv := invs[len(invs)-1]
		fs := h.waitReport(inv)
		h.waitDomainGone(inv)
		h.waitCustody()
		results, errs = append(results, r), append(errs, err)
		rr, _ := h.resolveOf(ctx, inv, callCreds) // judged below
		for _, f := range h.judge(fs, judgeFacts{res: r, mutErr: err, resolve: rr}) {
			if f.Attack == run.attack {
				after = append(after, f)
			}
		}
	}
	h.logTable(after)

	// Every answer must be true: the hostile engine claimed commits it never made.
	for i, r := range results {
		if err := errs[i]; err != nil || r.Phase != rpc.PhaseIndeterminate || r.Code != rpc.ReasonUnconfirmedCommit || r.CommittedVersion != 0 {
			t.Errorf("the hostile engine's claimed commit (%s) was answered %+v (error %v); want INDETERMINATE %d", invs[i], r, err, rpc.ReasonUnconfirmedCommit)
		}
	}
	if v, err := dataset.LatestVersion(context.Background(), h.st, "ds"); err != nil || v != 1 {
		t.Errorf("dataset ds is at version %d (%v) after mutations that wrote nothing; want 1", v, err)
	}
	for _, inv := range invs {
		// A liar's settle keeps lying: the sidecar may answer UNKNOWN, never COMMITTED.
		if r, err := h.resolveOf(ctx, inv, callCreds); err != nil || r.Outcome == rpc.OutcomeCommitted ||
			!strings.Contains(inv, hostile.LiarMarker) && r.Outcome != rpc.OutcomeNotCommitted {
			t.Errorf("index.resolve of the hostile invocation %s: %+v %v; want NOT_COMMITTED (never COMMITTED)", inv, r, err)
		}
	}
	if strings.Contains(victimRes.Message, "forged") {
		t.Errorf("the other worker's answer was forged: %+v", victimRes)
	}
	for _, f := range after {
		if f.Verdict != hostile.Blocked && !h.allowed(f.Attack) {
			t.Errorf("attack %s: %s (%s)", f.Attack, f.Verdict, f.Evidence)
		}
	}
	for _, name := range h.required() {
		if !slices.ContainsFunc(after, func(f hostile.Finding) bool { return f.Attack == name }) {
			t.Errorf("attack %s did not report", name)
		}
	}
}

func (h *hostileRun) openStore(onMinIO bool) {
	h.t.Helper()
	if !onMinIO {
		h.st, h.store = h.e.store, rpc.StoreSpec{URL: "file://" + h.e.root}
		return
	}
	srv := testminio.Shared(h.t)
	bucket := h.bucket
	st, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		h.t.Fatal(err)
	}
	h.st, h.store = st, rpc.StoreSpec{URL: "s3://" + bucket, Endpoint: srv.Endpoint}
}

func (h *hostileRun) firstKey(prefix string) string {
	h.t.Helper()
	for info, err := range h.st.List(context.Background(), prefix) {
		if err != nil {
			h.t.Fatal(err)
		}
		return info.Key
	}
	h.t.Fatalf("no object under %s", prefix)
	return ""
}

// listen opens the TCP listener the engine must not reach; it records every line it hears.
func (h *hostileRun) listen() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	h.t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			h.mu.Lock()
			h.heard = append(h.heard, strings.TrimSpace(line))
			h.mu.Unlock()
		}
	}()
	return ln.Addr().String()
}

// startVictim starts a built-in mutation that hangs with its own credentials in memory (the
// hostile engine's victim) and returns its worker's pid once it runs.
func (h *hostileRun) startVictim(onMinIO bool) (string, int, <-chan rpc.MutateResult) {
	h.t.Helper()
	inv := randID("victim-")
	p := h.e.params(inv, "victim", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree)
	p.Dataset.Store, p.Fault = h.store, "hang"
	p.Credentials = &rpc.Credentials{AccessKey: "victim-access", SecretKey: h.victimSecret}
	if onMinIO {
		p.Credentials.AccessKey = testminio.Shared(h.t).AccessKey
	}
	p.DeadlineUnixMs = time.Now().Add(5 * time.Minute).UnixMilli()
	done := make(chan rpc.MutateResult, 1)
	go func() {
		res, err := h.e.c.Mutate(context.Background(), p)
		if err != nil {
			res.Message = "error: " + err.Error()
		}
		done <- res
	}()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if dom := h.e.domainOf(inv); dom != "" {
			if pids := testsidecar.ProcessesIn(h.e.parent + "/*/" + dom); len(pids) > 0 {
				var pid int
				fmt.Sscan(pids[0], &pid)
				return inv, pid, done
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatalf("the victim mutation %s never ran", inv)
	return "", 0, nil
}

// stopVictim kills the victim's worker if the attacks left it running and returns its answer.
func (h *hostileRun) stopVictim(inv string, pid int, done <-chan rpc.MutateResult) rpc.MutateResult {
	select {
	case res := <-done:
		return res
	default:
	}
	if start, err := startTimeOf(pid); err == nil && start != "" {
		if p, err := os.FindProcess(pid); err == nil { // a pidfd: never another process
			_ = p.Signal(syscall.SIGKILL)
		}
	}
	select {
	case res := <-done:
		return res
	case <-time.After(time.Minute):
		h.t.Errorf("the victim %s did not answer after its worker was killed", inv)
		return rpc.MutateResult{}
	}
}

// waitReport waits for the engine's last report line and returns its findings. An engine the
// sidecar killed (a protocol violation) never writes it: once its domain is gone, what it wrote
// is what there is.
func (h *hostileRun) waitReport(inv string) []hostile.Finding {
	deadline := time.Now().Add(3 * time.Minute)
	var gone time.Time
	for {
		var lines []string
		for _, l := range strings.Split(h.e.logs.String(), "\n") {
			if strings.Contains(l, inv) {
				lines = append(lines, workerLine(l))
			}
		}
		f, done := hostile.Parse(lines)
		if gone.IsZero() && h.domainGone(inv) {
			gone = time.Now()
		}
		// After the domain is gone its last stderr lines may still be on their way to the log.
		drained := !gone.IsZero() && time.Since(gone) > 5*time.Second
		if done || drained || time.Now().After(deadline) {
			if !done {
				h.t.Errorf("the hostile engine's report did not finish (%d findings)", len(f))
			}
			return f
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// workerLine is the engine's own stderr line inside one of the sidecar's JSON log lines.
func workerLine(l string) string {
	var entry struct {
		Line string `json:"line"`
	}
	if json.Unmarshal([]byte(l), &entry) == nil && entry.Line != "" {
		return entry.Line
	}
	return l
}

// waitDomainGone waits until the hostile domain's processes and cgroups are gone (once the host
// took a forged answer, the real one comes later).
func (h *hostileRun) waitDomainGone(inv string) {
	for deadline := time.Now().Add(time.Minute); !h.domainGone(inv); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Errorf("the hostile domain of %s is still there a minute after the answer", inv)
			return
		}
	}
}

// domainGone: the domain that served inv was assigned and has no process and no cgroup left.
func (h *hostileRun) domainGone(inv string) bool {
	dom := h.e.domainOf(inv)
	return dom != "" && len(testsidecar.ProcessesIn(h.e.parent+"/*/"+dom)) == 0 && !h.domainDirExists(dom)
}

func (h *hostileRun) domainDirExists(dom string) bool {
	for _, r := range testsidecar.Roots() {
		if m, _ := filepath.Glob(filepath.Join(r, h.e.parent, "*", dom)); len(m) > 0 {
			return true
		}
	}
	return false
}

// waitCustody waits until custody has settled the hostile invocation: no ticket held, nothing
// awaiting deletion.
func (h *hostileRun) waitCustody() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var st rpc.ObjectsStatusResult
	for {
		if err := h.e.c.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st); err != nil {
			h.t.Errorf("objects.status: %v", err)
			return
		}
		if st.Ledger.Used == 0 && st.Ledger.PendingDelete == 0 {
			return
		}
		if ctx.Err() != nil {
			h.t.Errorf("custody still holds tickets after the hostile run: %+v", st.Ledger)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// requests is the sidecar's count of answered requests of method.
func (h *hostileRun) requests(method string) float64 {
	text, err := h.e.c.Metrics(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	var n float64
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "steward_rpc_requests_total{") && strings.Contains(line, `method="`+method+`"`) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += v
		}
	}
	return n
}

// resolveOf asks index.resolve about a hostile invocation (settled by the engine's own settle).
func (h *hostileRun) resolveOf(ctx context.Context, inv string, creds *rpc.Credentials) (rpc.ResolveResult, error) {
	return h.e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: inv, Engine: "hostile", PinnedVersion: 1, Credentials: creds,
		Dataset: rpc.DatasetRef{Store: h.store, Path: "ds"}})
}

type judgeFacts struct {
	res       rpc.MutateResult
	mutErr    error
	resolve   rpc.ResolveResult
	survivors []string
	injected  float64
	victim    rpc.MutateResult
}

// judge completes the engine's findings with what only the outside can see after the answer:
// Pending ones get their verdict, others their after-the-fact evidence.
func (h *hostileRun) judge(in []hostile.Finding, x judgeFacts) []hostile.Finding {
	out := make([]hostile.Finding, 0, len(in))
	for _, f := range in {
		switch {
		case f.Attack == "answer.claim-commit":
			truthful := x.mutErr == nil && x.res.Phase == rpc.PhaseIndeterminate && x.res.Code == rpc.ReasonUnconfirmedCommit
			f.Verdict = verdictOf(!truthful)
			f.Evidence = fmt.Sprintf("the host was told %s %d %s (error %v)", x.res.Phase, x.res.Code, x.res.CompletionReason, x.mutErr)
		case f.Attack == "process.orphan" || f.Attack == "cgroup.escape":
			suffix := map[string]string{"process.orphan": ":orphan", "cgroup.escape": ":escape"}[f.Attack]
			var alive []string
			for _, s := range x.survivors {
				if strings.HasSuffix(s, suffix) {
					alive = append(alive, s)
				}
			}
			if len(alive) > 0 {
				f.Verdict = hostile.Succeeded
			} else if f.Verdict == hostile.Pending {
				f.Verdict = hostile.Blocked
			}
			f.Evidence += fmt.Sprintf("; after the answer, alive: %v", alive)
		case strings.HasPrefix(f.Attack, "fs.write-") && f.Verdict == hostile.Pending:
			_, err := os.Stat(f.Left[0])
			f.Verdict = verdictOf(err == nil)
			f.Evidence += fmt.Sprintf("; on the host: %v", existence(err))
		case strings.HasPrefix(f.Attack, "custody.") && h.existing[strings.TrimPrefix(f.Attack, "custody.")] != "":
			_, err := h.st.Stat(context.Background(), h.existing[strings.TrimPrefix(f.Attack, "custody.")])
			if errors.Is(err, storage.ErrNotFound) {
				f.Verdict = hostile.Succeeded
			}
			f.Evidence += fmt.Sprintf("; the object after custody settled: %v", existence(err))
		case f.Attack == "settle.lie":
			lied := x.mutErr == nil && x.res.Phase == rpc.PhaseNativeReturn && x.res.Code == rpc.NativeOK || x.resolve.Outcome == rpc.OutcomeCommitted
			f.Verdict = verdictOf(lied)
			f.Evidence = fmt.Sprintf("the host was told %s %d %s (error %v); index.resolve said %s", x.res.Phase, x.res.Code, x.res.CompletionReason, x.mutErr, x.resolve.Outcome)
		case f.Attack == "sidecar.stdin-inject":
			f.Evidence += fmt.Sprintf("; the sidecar answered %v more objects.status requests than the test sent", x.injected)
		case f.Attack == "sidecar.stdout-forge":
			f.Evidence += fmt.Sprintf("; the host was told %s %d %q", x.res.Phase, x.res.Code, x.res.Message)
		case f.Attack == "victim.forge-result":
			f.Evidence += fmt.Sprintf("; the victim's host was told %s %d %q", x.victim.Phase, x.victim.Code, x.victim.Message)
		case f.Attack == "net.connect":
			h.mu.Lock()
			f.Evidence += fmt.Sprintf("; the listener heard %q", h.heard)
			h.mu.Unlock()
		}
		if f.Digest != "" {
			f.Evidence += "; " + h.digestNote(f)
		}
		out = append(out, f)
	}
	return out
}

func (h *hostileRun) digestNote(f hostile.Finding) string {
	ds := strings.Split(f.Digest, ",")
	switch {
	case strings.HasPrefix(f.Attack, "victim.") && slices.Contains(ds, hostile.Digest(h.victimSecret)):
		return "it read the other worker's secret"
	case slices.Contains(ds, hostile.Digest(h.sidecarSecret)):
		return "it read the sidecar's own S3 secret"
	}
	if b, err := os.ReadFile(h.credFile); err == nil && f.Digest == hostile.Digest(string(b)) {
		return "it read the credentials file"
	}
	return "secrets it read: " + f.Digest
}

func verdictOf(succeeded bool) hostile.Verdict {
	if succeeded {
		return hostile.Succeeded
	}
	return hostile.Blocked
}

func existence(err error) string {
	switch {
	case err == nil:
		return "exists"
	case errors.Is(err, os.ErrNotExist), errors.Is(err, storage.ErrNotFound):
		return "absent"
	}
	return err.Error()
}

// allowed: what an s3:// store keeps by design (the network, to reach its store).
func (h *hostileRun) allowed(attack string) bool {
	return h.onMinIO && (attack == "ns.net" || attack == "net.connect")
}

// required are the attacks every run must report.
func (h *hostileRun) required() []string {
	names := []string{"identity.host-root", "identity.capabilities", "identity.read-shadow", "identity.chown-foreign",
		"identity.rlimit-raise", "identity.proc-sys-write", "ns.mnt", "ns.net", "ns.pid", "ns.user", "ns.ipc", "ns.uts", "ns.cgroup",
		"ns.find-sidecar", "victim.mem", "victim.process-vm-readv", "victim.ptrace-seize", "victim.sigstop", "victim.forge-result",
		"sidecar.environ", "sidecar.mem", "sidecar.process-vm-readv", "sidecar.ptrace-seize", "sidecar.pidfd-getfd", "sidecar.sigstop",
		"sidecar.signal-any", "sidecar.stdin-inject", "sidecar.stdout-forge", "cgroup.raise-memory", "cgroup.raise-pids", "cgroup.escape",
		"process.orphan", "nnp.children", "nnp.builtin-worker-threads", "seccomp.ptrace", "seccomp.process_vm_readv", "seccomp.mount", "seccomp.bpf",
		"seccomp.perf_event_open", "seccomp.kexec_load", "seccomp.init_module", "seccomp.keyctl", "seccomp.setns",
		"seccomp.unshare-user", "seccomp.io_uring_setup", "seccomp.userfaultfd", "fs.write-state-dir", "fs.write-host-dir",
		"fs.write-tmp", "fs.read-credentials", "fs.read-state-dir", "fs.read-kcore", "fs.exec-shell", "fs.mknod-disk", "net.connect",
		"custody.foreign-manifest", "custody.foreign-data", "custody.own-manifest", "custody.own-data", "custody.outside-dataset",
		"custody.traversal", "custody.whole-folder", "custody.tickets", "answer.claim-commit", "settle.lie"}
	if !h.onMinIO {
		names = append(names, "fs.write-other-dataset", "fs.write-store-root")
	}
	return names
}

// logTable logs the attack table (markdown) for the issue note.
func (h *hostileRun) logTable(fs []hostile.Finding) {
	var b strings.Builder
	b.WriteString("\n| attack | verdict | errno | evidence |\n|---|---|---|---|\n")
	n := 0
	for _, f := range fs {
		v := string(f.Verdict)
		if f.Verdict != hostile.Blocked {
			if h.allowed(f.Attack) {
				v += " (allowed: s3://)"
			} else {
				n++
			}
		}
		ev := strings.ReplaceAll(f.Evidence, "|", "/")
		if len(ev) > 300 {
			ev = ev[:300] + "…"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f.Attack, v, f.Errno, ev)
	}
	h.t.Logf("hostile engine on %s: %d attacks, %d not blocked%s", h.store.URL, len(fs), n, b.String())
}

// threadsNNP is the test's own look, from the host, at NoNewPrivs of every thread of the other
// (built-in) worker: a thread without it forks children without it.
func threadsNNP(pid int) hostile.Finding {
	f := hostile.Finding{Attack: "nnp.builtin-worker-threads", Tried: "(the test, from the host) read NoNewPrivs of every thread of the built-in worker in /proc/<pid>/task/*/status"}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		f.Verdict, f.Evidence = hostile.Inconclusive, fmt.Sprintf("cannot list the worker's threads: %v", err)
		return f
	}
	var without []string
	for _, tk := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, tk.Name()))
		if strings.Contains(string(b), "NoNewPrivs:\t0") { // a thread gone meanwhile reads empty
			without = append(without, tk.Name())
		}
	}
	f.Verdict = verdictOf(len(without) > 0)
	f.Evidence = fmt.Sprintf("%d of %d threads without NoNewPrivs: %v", len(without), len(tasks), without)
	return f
}

// killSurvivors kills every process the engine left running (found by its argv marker).
func killSurvivors() {
	for _, pid := range markerProcesses(hostile.MarkerPrefix) {
		var n int
		fmt.Sscan(pid, &n)
		if p, err := os.FindProcess(n); err == nil { // a pidfd: never another process
			_ = p.Signal(syscall.SIGKILL)
		}
	}
}

// removeLeftovers removes the files and cgroups the engine left, so that even a failed run
// leaves the machine clean.
func (h *hostileRun) removeLeftovers() {
	if h.e == nil {
		return
	}
	killSurvivors()
	var lines []string
	for _, l := range strings.Split(h.e.logs.String(), "\n") {
		lines = append(lines, workerLine(l))
	}
	findings, _ := hostile.Parse(lines)
	for _, f := range findings {
		for _, l := range f.Left {
			if strings.HasPrefix(l, "marker:") {
				continue
			}
			// A cgroup empties only once its killed processes are gone: retry for a while.
			var err error
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				if err = os.Remove(l); err == nil || errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
					break
				}
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				h.t.Errorf("could not remove %s, left by the hostile engine: %v", l, err)
			}
		}
	}
}

// markerProcesses lists the pids whose argv holds a word starting with marker.
func markerProcesses(marker string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, w := range strings.Split(string(b), "\x00") {
			if strings.HasPrefix(w, marker) {
				out = append(out, e.Name()+" "+w)
			}
		}
	}
	return out
}

func statStart(t *testing.T, pid int) string {
	s, err := startTimeOf(pid)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startTimeOf(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 20 {
		return "", fmt.Errorf("short /proc/%d/stat", pid)
	}
	return f[19], nil
}

// nsIDs is "mnt=…,net=…" of a process's namespaces.
func nsIDs(t *testing.T, pid int) string {
	var parts []string
	for _, k := range []string{"mnt", "net", "pid", "user", "ipc", "uts", "cgroup"} {
		l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, k))
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, k+"="+strings.TrimSuffix(l[strings.IndexByte(l, '[')+1:], "]"))
	}
	return strings.Join(parts, ",")
}
