package sidecar_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"unicode"

	"github.com/cba1309c/steward/internal/testing/hostile"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storage/gateway"
)

// The hostile test's sidecar bounds: what one invocation may write through its gateway
// (--worker-disk) and the objects it may create (--ledger-quota), small so that the engine
// reaches both quickly.
const (
	hostileWorkerDisk   = 8 << 20
	hostileObjectQuota  = 64
	hostileWorkerMemory = 256 << 20 // --worker-memory, as testsidecar.FastArgs sets it
)

// hostileAreas are the attack areas of the main invocation; "objects" runs in one of its own.
const hostileAreas = "identity,ns,victim,sidecar,cgroup,process,nnp,seccomp,fs,net,store,custody,gateway,progress"

// TestHostileEngine runs internal/testing/hostile — an engine of the public protocol that attacks its
// containment and its storage gateway instead of building an index — through a real sidecar
// (root, real cgroups), on a file:// store and on MinIO, next to a second worker mid-mutation
// (its victim). Every attack must be judged blocked, from the engine's view and, where only the
// outside can tell, from the store's contents, the sidecar's answers, index.resolve, the
// ledger, the host's listeners and the logs (issue 44 item 7). It logs the attack table.
func TestHostileEngine(t *testing.T) {
	bin := buildHostile(t)
	for _, kind := range []string{"file", "minio"} {
		t.Run(kind, func(t *testing.T) { runHostile(t, bin, kind == "minio") })
	}
}

// buildHostile builds the engine, static (a copy of it must run from anywhere, TMPDIR
// included), into a world-readable directory (a guest uid must be able to exec it), removed at
// cleanup.
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
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../internal/testing/hostile/cmd/hostile")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build hostile engine: %v\n%s", err, out)
	}
	return bin
}

// note is one progress notification and when the host got it.
type note struct {
	p  rpc.ProgressParams
	at time.Time
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
	creds   *rpc.Credentials

	sidecarSecret, victimSecret, callSecret, credFile string
	existing                                          map[string]string // reserve/overwrite target name → existing key

	heard       *heard
	statusCalls int // objects.status requests the test itself sent

	mu    sync.Mutex
	notes []note
}

// heard records every line the test's listeners (TCP, UDP, unix) receive.
type heard struct {
	mu    sync.Mutex
	lines []string
}

func (h *heard) add(where, line string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, where+": "+strings.TrimSpace(line))
}

// of returns what the listeners heard that names inv.
func (h *heard) of(inv string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.lines {
		if strings.Contains(l, inv) {
			out = append(out, l)
		}
	}
	return out
}

func runHostile(t *testing.T, bin string, onMinIO bool) {
	h := &hostileRun{t: t, onMinIO: onMinIO, tmp: t.TempDir(), existing: map[string]string{}, heard: &heard{}}
	// Registered before the sidecar starts, so it runs after the sidecar exited: an escaped
	// process killed earlier (killSurvivors) is a zombie of the sidecar until then.
	t.Cleanup(h.removeLeftovers)
	noTempDirsLeft(t, h.tmp)
	stateDir, hostDir := t.TempDir(), t.TempDir()
	h.startSidecar(bin, stateDir)
	h.plant()
	victimInv, victimPid, victimDone := h.startVictim()
	victimNNP := threadsNNP(victimPid)
	params := h.targets(victimPid, stateDir, hostDir)
	injectedBefore := h.requests(rpc.MethodObjectsStatus)

	// The main invocation: every attack area, then a claimed commit that never happened.
	before := h.snapshot()
	params[hostile.ParamOnly] = hostileAreas
	fds := watchFDs(h.e.c.Pid())
	main := h.mutate("ds", hostile.ModeMain, params, nil, 2*time.Minute)
	fdBase, fdPeak := fds()
	main.findings = h.settle(main.inv)
	injected := h.requests(rpc.MethodObjectsStatus) - injectedBefore - float64(h.statusCalls)
	survivors := markerProcesses(hostile.MarkerPrefix + main.inv)
	victimRes := h.stopVictim(victimInv, victimPid, victimDone)
	h.waitCustody()
	after := h.snapshot()
	var table []hostile.Finding
	table = append(table, h.judge(main, judgeFacts{survivors: survivors, injected: injected, victim: victimRes, before: before, after: after,
		fdBase: fdBase, fdPeak: fdPeak})...)
	table = append(table, victimNNP, h.outsideUnchanged(before, after), h.orphans(main.inv, before, after))

	// The object quota, in an invocation of its own (the main one spent its byte quota).
	params[hostile.ParamOnly] = "objects"
	objects := h.mutate("ds", hostile.ModeMain, params, nil, time.Minute)
	objects.findings = h.settle(objects.inv)
	table = append(table, h.judge(objects, judgeFacts{before: after, after: h.snapshot()})...)
	delete(params, hostile.ParamOnly)

	// One invocation per answer the sidecar must not pass on.
	answered := []*hostileCall{main, objects}
	for _, mode := range []string{hostile.ModeForge, hostile.ModeNoop, hostile.ModeUUID, hostile.ModeMessage, hostile.ModeLinger} {
		before := h.snapshot()
		c := h.mutate("ds", mode, params, nil, 20*time.Second)
		c.findings = h.settle(c.inv)
		h.waitCustody()
		table = append(table, h.judge(c, judgeFacts{before: before, after: h.snapshot()})...)
		answered = append(answered, c)
	}
	table = append(table, h.races(params)...)
	table = append(table, h.alias(params)...)
	h.logTable(table)
	h.checkTruth(answered, victimRes)
	for _, f := range table {
		if f.Verdict != hostile.Blocked {
			t.Errorf("attack %s: %s (%s)", f.Attack, f.Verdict, f.Evidence)
		}
	}
	for _, name := range h.required() {
		if !slices.ContainsFunc(table, func(f hostile.Finding) bool { return f.Attack == name }) {
			t.Errorf("attack %s did not report", name)
		}
	}
}

// startSidecar starts the test's sidecar with the hostile engine registered and small gateway
// bounds. Its own keys come from its credentials file (never its environment), for the test's
// bucket only (--allow-store); the hostile engine tries to read that file.
func (h *hostileRun) startSidecar(bin, stateDir string) {
	minio := testminio.Shared(h.t)
	own := rpc.Credentials{AccessKey: "hostile-test"}
	var allow []string
	if h.onMinIO {
		h.sidecarSecret, h.victimSecret, h.callSecret = minio.SecretKey, minio.SecretKey, minio.SecretKey
		own = rpc.Credentials{AccessKey: minio.AccessKey, SecretKey: minio.SecretKey}
		h.creds = &rpc.Credentials{AccessKey: minio.AccessKey, SecretKey: minio.SecretKey}
		h.bucket = strings.ToLower(randID("hostile-"))
		allow = []string{"--allow-store", "s3://" + h.bucket + "@" + minio.Endpoint}
	} else {
		h.sidecarSecret, h.victimSecret, h.callSecret = randID("sidecar-secret-"), randID("victim-secret-"), randID("call-secret-")
		own.SecretKey = h.sidecarSecret
		// Keys need a store to go to; this one is never used: they sit in the sidecar only.
		allow = []string{"--allow-store", "s3://hostile-unused@127.0.0.1:9"}
		h.creds = &rpc.Credentials{AccessKey: "hostile-call", SecretKey: h.callSecret}
	}
	h.credFile = testsidecar.CredentialsFile(h.t, own, 0)
	args := append([]string{"--state-dir", stateDir, "--engine", "hostile=" + bin, "--s3-credentials-file", h.credFile,
		"--worker-disk", fmt.Sprint(hostileWorkerDisk), "--ledger-quota", fmt.Sprint(hostileObjectQuota),
		"--worker-memory", fmt.Sprint(hostileWorkerMemory)}, allow...)
	h.e = h.newSidecar(append(os.Environ(), "TMPDIR="+h.tmp), args...)
	h.t.Cleanup(killSurvivors) // runs before the sidecar's own leftover check
	h.openStore(h.onMinIO)
}

// hostileSibling is a key of a dataset whose name starts with "ds".
const hostileSibling = "dsX/data/sibling.bin"

// plant creates the datasets (the engine's, another, the victim's, two to race on, one to
// alias), more keys under ds than one listing page, a sibling dataset, and names the existing
// objects the engine aims at.
func (h *hostileRun) plant() {
	for _, ds := range []string{"ds", "other", "victim", "race1", "race2", "alias"} {
		if _, _, err := dataset.Create(context.Background(), h.st, ds, dataset.NewGenerator(200, 7), dataset.WriteOptions{RowsPerFragment: 100}); err != nil {
			h.t.Fatalf("create %s: %v", ds, err)
		}
	}
	h.plantMany(hostileManyPrefix, 1010)
	if err := h.st.Put(context.Background(), hostileSibling, strings.NewReader("sibling"), 7); err != nil {
		h.t.Fatal(err)
	}
	h.existing["foreign-manifest"] = h.firstKey("other/_versions/")
	h.existing["foreign-data"] = h.firstKey("other/data/")
	h.existing["own-manifest"] = h.firstKey("ds/_versions/")
	h.existing["own-data"] = h.firstKey("ds/data/")
}

// targets are the engine's parameters: what it aims at (the sidecar, the victim, the test's
// listeners, the store's directories and endpoint, existing objects) and the bounds it tries.
func (h *hostileRun) targets(victimPid int, stateDir, hostDir string) map[string]string {
	sc := h.e.c.Pid()
	rate, burst := h.gatewayRate()
	params := map[string]string{
		hostile.ParamSidecarPid: fmt.Sprint(sc), hostile.ParamSidecarStart: statStart(h.t, sc), hostile.ParamSidecarNS: nsIDs(h.t, sc),
		hostile.ParamVictimPid: fmt.Sprint(victimPid), hostile.ParamVictimStart: statStart(h.t, victimPid),
		hostile.ParamListen: h.listenTCP("127.0.0.1:0"), hostile.ParamTCPTargets: strings.Join(h.otherTCPTargets(), ","),
		hostile.ParamUDP: strings.Join(h.udpTargets(), ","), hostile.ParamUnixSockets: strings.Join(h.unixSockets(), ","),
		hostile.ParamAbstract: h.abstractSocket(), hostile.ParamStoreAddr: testminio.Shared(h.t).Endpoint,
		hostile.ParamStateDir: stateDir, hostile.ParamCredFile: h.credFile, hostile.ParamHostDir: hostDir,
		hostile.ParamSibling: hostileSibling, hostile.ParamWorkerDisk: fmt.Sprint(hostileWorkerDisk), hostile.ParamTmpBound: fmt.Sprint(hostileWorkerMemory),
		hostile.ParamObjectQuota: fmt.Sprint(hostileObjectQuota), hostile.ParamRate: fmt.Sprint(rate), hostile.ParamBurst: fmt.Sprint(burst),
	}
	var parts []string
	for name, key := range h.existing {
		parts = append(parts, name+"="+key)
	}
	slices.Sort(parts)
	params[hostile.ParamExisting] = strings.Join(parts, ";")
	// The file:// store's root (on MinIO, the sidecar env's unused local root: a host
	// directory all the same, which the domain must not see either).
	params[hostile.ParamStoreRoot] = h.e.root
	if !h.onMinIO {
		params[hostile.ParamOtherDir] = filepath.Join(h.e.root, "other")
		params[hostile.ParamSlowLoris] = "1" // one store is enough for the HTTP server's timeout
	}
	return params
}

// checkTruth: the sidecar's own account must be true. No claimed commit passed on (main,
// objects, forge), no commit at all on ds, index.resolve of every invocation on ds
// NOT_COMMITTED, and the victim's answer not forged.
func (h *hostileRun) checkTruth(calls []*hostileCall, victim rpc.MutateResult) {
	for _, c := range calls[:3] {
		if r := c.res; c.err != nil || r.Phase != rpc.PhaseIndeterminate || r.Code != rpc.ReasonUnconfirmedCommit || r.CommittedVersion != 0 {
			h.t.Errorf("the hostile engine's claimed commit (%s, %s) was answered %+v (error %v); want INDETERMINATE %d", c.inv, c.mode, r, c.err, rpc.ReasonUnconfirmedCommit)
		}
	}
	if v, err := dataset.LatestVersion(context.Background(), h.st, "ds"); err != nil || v != 1 {
		h.t.Errorf("dataset ds is at version %d (%v) after mutations that answered no commit; want 1 (a manifest written after an answer: see answer.after-answer-writes)", v, err)
	}
	for _, c := range calls {
		if r, err := h.resolveOf(c.inv, "ds"); err != nil || r.Outcome != rpc.OutcomeNotCommitted {
			h.t.Errorf("index.resolve of the hostile invocation %s (%s): %+v %v; want NOT_COMMITTED", c.inv, c.mode, r, err)
		}
	}
	if strings.Contains(victim.Message, "forged") {
		h.t.Errorf("the other worker's answer was forged: %+v", victim)
	}
}

// newSidecar is newSidecarWithEnv whose progress notifications are kept with their arrival
// time (the rate bound is judged from them).
func (h *hostileRun) newSidecar(env []string, args ...string) *sidecarEnv {
	h.t.Helper()
	e := &sidecarEnv{t: h.t, root: testenv.GuestDir(h.t)}
	sc := testsidecar.Start(h.t, testsidecar.Options{Args: args, Env: env,
		OnNotify: func(method string, params json.RawMessage) {
			var p rpc.ProgressParams
			if method == rpc.NotifyProgress && json.Unmarshal(params, &p) == nil {
				h.mu.Lock()
				h.notes = append(h.notes, note{p: p, at: time.Now()})
				h.mu.Unlock()
			}
		}})
	e.c, e.parent, e.logs, e.sc = sc.Client, sc.Parent, sc.Logs, sc
	st, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindLocal, Root: e.root})
	if err != nil {
		h.t.Fatal(err)
	}
	e.store = st
	return e
}

// notesOf returns the progress notifications of inv.
func (h *hostileRun) notesOf(inv string) []note {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []note
	for _, n := range h.notes {
		if n.p.InvocationID == inv {
			out = append(out, n)
		}
	}
	return out
}

// gatewayRate is the gateway's request rate bound and burst, as hello reports them (the
// gateway's defaults where it reports none).
func (h *hostileRun) gatewayRate() (int, int) {
	rate := gateway.DefaultRequestsPerSecond
	if s := h.e.c.Info().Storage; s != nil && s.RequestsPerSecond > 0 {
		rate = int(s.RequestsPerSecond)
	}
	return rate, 2 * rate
}

func (h *hostileRun) openStore(onMinIO bool) {
	h.t.Helper()
	if !onMinIO {
		h.st, h.store = h.e.store, rpc.StoreSpec{URL: "file://" + h.e.root}
		return
	}
	srv := testminio.Shared(h.t)
	st, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: h.bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		h.t.Fatal(err)
	}
	h.st, h.store = st, rpc.StoreSpec{URL: "s3://" + h.bucket, Endpoint: srv.Endpoint}
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

// hostileManyPrefix holds the keys planted so that the dataset's listing is longer than one
// page (gateway.list-huge).
const hostileManyPrefix = "ds/hostile-many/"

// plantMany puts n small objects under prefix, 16 at a time.
func (h *hostileRun) plantMany(prefix string, n int) {
	h.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs <- h.st.Put(context.Background(), fmt.Sprintf("%sk%05d", prefix, i), strings.NewReader("k"), 1)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			h.t.Fatalf("plant %s: %v", prefix, err)
		}
	}
}

// snapshot is every object of the store (the local store's staging folder excluded) by key,
// as the SHA-256 of its bytes (the planted many by their size and time: no attack aims at them).
func (h *hostileRun) snapshot() map[string]string {
	h.t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for info, err := range h.st.List(ctx, "") {
		if err != nil {
			h.t.Fatalf("snapshot: %v", err)
		}
		if strings.HasPrefix(info.Key, hostileManyPrefix) {
			out[info.Key] = fmt.Sprintf("%d bytes at %v", info.Size, info.ModTime.UnixNano())
			continue
		}
		b, err := storage.ReadAll(ctx, h.st, info.Key, 256<<20)
		if err != nil {
			out[info.Key] = "unreadable: " + err.Error()
			continue
		}
		sum := sha256.Sum256(b)
		out[info.Key] = hex.EncodeToString(sum[:])
	}
	return out
}

// changed describes how key differs between two snapshots ("" if it does not).
func changed(before, after map[string]string, key string) string {
	b, inB := before[key]
	a, inA := after[key]
	switch {
	case inB && !inA:
		return key + " was deleted"
	case !inB && inA:
		return key + " was created"
	case inB && a != b:
		return key + " was rewritten"
	}
	return ""
}

// listenTCP opens a TCP listener of the test that records the first line of each connection.
func (h *hostileRun) listenTCP(addr string) string {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return ""
	}
	h.record(ln, "tcp "+ln.Addr().String())
	return ln.Addr().String()
}

// hostAddrs are the host's non-loopback IPv4 addresses.
func hostAddrs() []string {
	var out []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			out = append(out, n.IP.String())
		}
	}
	return out
}

// otherTCPTargets listens on 127.0.0.2 and on the host's own addresses, on the gateway's port
// where it is free (the old rule allowed any address on the store's port) and on another.
func (h *hostileRun) otherTCPTargets() []string {
	var out []string
	for _, ip := range append([]string{"127.0.0.2"}, hostAddrs()...) {
		for _, port := range []string{"7480", "0"} {
			if a := h.listenTCP(net.JoinHostPort(ip, port)); a != "" {
				out = append(out, a)
			}
		}
	}
	return out
}

// udpTargets listens for datagrams on 127.0.0.1, 127.0.0.2 and the host's addresses.
func (h *hostileRun) udpTargets() []string {
	var out []string
	for _, ip := range append([]string{"127.0.0.1", "127.0.0.2"}, hostAddrs()...) {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(ip, "0"))
		if err != nil {
			continue
		}
		done := make(chan struct{})
		h.t.Cleanup(func() { pc.Close(); <-done })
		go func() {
			defer close(done)
			buf := make([]byte, 2048)
			for {
				n, _, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				h.heard.add("udp "+pc.LocalAddr().String(), string(buf[:n]))
			}
		}()
		out = append(out, pc.LocalAddr().String())
	}
	return out
}

// unixSockets makes pathname unix socket listeners of mode 0777: one in a directory of the
// host's /tmp, one in the sidecar's TMPDIR (where the domains' own temp dirs are made).
func (h *hostileRun) unixSockets() []string {
	dir, err := os.MkdirTemp("", "hostile-sock-")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { os.RemoveAll(dir) })
	_ = os.Chmod(dir, 0o777)
	var out []string
	for _, p := range []string{filepath.Join(dir, "host.sock"), filepath.Join(h.tmp, "hostile-host.sock")} {
		ln, err := net.Listen("unix", p)
		if err != nil {
			h.t.Fatal(err)
		}
		_ = os.Chmod(p, 0o777)
		h.record(ln, "unix "+p)
		out = append(out, p)
	}
	return out
}

// record accepts connections on ln until cleanup and records the first line of each.
func (h *hostileRun) record(ln net.Listener, name string) {
	done := make(chan struct{})
	h.t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			h.heard.add(name, line)
		}
	}()
}

// abstractSocket listens on an abstract unix socket (the host's network namespace's).
func (h *hostileRun) abstractSocket() string {
	name := randID("steward-hostile-")
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		h.t.Fatal(err)
	}
	h.record(ln, "unix @"+name)
	return name
}

// startVictim starts a built-in mutation that hangs with its own credentials in memory (the
// hostile engine's victim) and returns its worker's pid once it runs.
func (h *hostileRun) startVictim() (string, int, <-chan rpc.MutateResult) {
	h.t.Helper()
	inv := randID("victim-")
	p := h.e.params(inv, "victim", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree)
	p.Dataset.Store, p.Fault = h.store, "hang"
	p.Credentials = &rpc.Credentials{AccessKey: "victim-access", SecretKey: h.victimSecret}
	if h.onMinIO {
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

// hostileCall is one invocation of the hostile engine and what came of it.
type hostileCall struct {
	inv, mode, path string
	res             rpc.MutateResult
	err             error
	answeredAt      time.Time
	findings        []hostile.Finding
}

// mutate runs one invocation of the hostile engine in mode on the dataset at path; during is
// called (if not nil) while it runs, with its invocation id.
func (h *hostileRun) mutate(path, mode string, params map[string]string, during func(inv string), deadline time.Duration) *hostileCall {
	c := &hostileCall{inv: randID("hostile-" + mode + "-"), mode: mode, path: path}
	p := h.e.params(c.inv, path, 1, rpc.OpCreate, "ix", "name", hostile.IndexType)
	ps := map[string]string{}
	for k, v := range params {
		ps[k] = v
	}
	ps[hostile.ParamMode] = mode
	p.Dataset.Store, p.Engine, p.Credentials, p.Index.Params = h.store, "hostile", h.creds, ps
	p.DeadlineUnixMs = time.Now().Add(deadline).UnixMilli()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.res, c.err = h.e.c.Mutate(context.Background(), p)
		c.answeredAt = time.Now()
	}()
	if during != nil {
		during(c.inv)
	}
	<-done
	return c
}

// settle waits for inv's report, its domain's end and custody's settling, and returns every
// finding it wrote (a lingering process's late ones included).
func (h *hostileRun) settle(inv string) []hostile.Finding {
	h.waitReport(inv)
	h.waitDomainGone(inv)
	h.waitCustody()
	f, _ := h.findings(inv)
	return f
}

// findings parses inv's report lines from the sidecar's log.
func (h *hostileRun) findings(inv string) ([]hostile.Finding, bool) {
	var lines []string
	for _, l := range strings.Split(h.e.logs.String(), "\n") {
		if strings.Contains(l, inv) {
			lines = append(lines, workerLine(l))
		}
	}
	return hostile.Parse(lines)
}

// waitReport waits for the engine's last report line. An engine the sidecar killed (a protocol
// violation) never writes it: once its domain is gone, what it wrote is what there is.
func (h *hostileRun) waitReport(inv string) {
	deadline := time.Now().Add(3 * time.Minute)
	var gone time.Time
	for {
		f, done := h.findings(inv)
		if gone.IsZero() && h.domainGone(inv) {
			gone = time.Now()
		}
		// After the domain is gone its last stderr lines may still be on their way to the log.
		drained := !gone.IsZero() && time.Since(gone) > 2*time.Second
		if done || drained || time.Now().After(deadline) {
			if !done {
				h.t.Errorf("the hostile engine's report of %s did not finish (%d findings)", inv, len(f))
			}
			return
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

// waitDomainGone waits until the hostile domain's processes and cgroups are gone.
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

// waitCustody waits until custody has settled every invocation: no ticket held, nothing
// awaiting deletion.
func (h *hostileRun) waitCustody() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var st rpc.ObjectsStatusResult
	for {
		h.statusCalls++
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

// resolveOf asks index.resolve about a hostile invocation on the dataset at path (pinned 1).
func (h *hostileRun) resolveOf(inv, path string) (rpc.ResolveResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return h.e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: inv, Engine: "hostile", PinnedVersion: 1, Credentials: h.creds,
		Dataset: rpc.DatasetRef{Store: h.store, Path: path}})
}

type judgeFacts struct {
	survivors      []string
	injected       float64
	victim         rpc.MutateResult
	before, after  map[string]string
	fdBase, fdPeak int // the sidecar's open descriptors before the invocation and at most during it
}

// watchFDs counts the open descriptors of process pid every 10 ms until the returned function
// is called, which returns the first count and the highest.
func watchFDs(pid int) func() (int, int) {
	count := func() int {
		ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		return len(ents)
	}
	base := count()
	peak := base
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				peak = max(peak, count())
			}
		}
	}()
	return func() (int, int) {
		close(stop)
		<-done
		return base, peak
	}
}

// connectionBound is how many of the sidecar's descriptors one invocation may hold through its
// gateway: its domain's own RLIMIT_NOFILE per process (1,024), and room for the sidecar's own
// work beside it (its pipes, the victim's, the store's connections).
const connectionBound = 1024 + 128

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

func answerOf(res rpc.MutateResult, err error) string {
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("%s %d %s index_uuid %q", res.Phase, res.Code, res.CompletionReason, res.IndexUUID)
}

// judge completes one invocation's findings with what only the outside can see after its
// answer: Pending ones get their verdict, the others their after-the-fact evidence, and the
// store keys an attack aimed at are compared before and after.
func (h *hostileRun) judge(c *hostileCall, x judgeFacts) []hostile.Finding {
	var out []hostile.Finding
	var after []hostile.Finding // answer.after-put: one finding for all of them
	for _, f := range c.findings {
		switch {
		case f.Attack == "race.ready":
			continue
		case f.Attack == "answer.after-put":
			after = append(after, f)
			continue
		}
		h.judgeOne(c, &f, x)
		h.judgeLeft(&f, x)
		if f.Digest != "" && f.Attack != "leak.gateway-key-forms" {
			h.judgeDigest(&f)
		}
		out = append(out, f)
	}
	if c.mode == hostile.ModeLinger {
		out = append(out, h.afterWrites(c, after, x))
	}
	return out
}

// judgeOne decides the findings only the outside can decide.
func (h *hostileRun) judgeOne(c *hostileCall, f *hostile.Finding, x judgeFacts) {
	switch f.Attack {
	case "answer.claim-commit":
		truthful := c.err == nil && c.res.Phase == rpc.PhaseIndeterminate && c.res.Code == rpc.ReasonUnconfirmedCommit && c.res.CommittedVersion == 0
		f.Verdict, f.Evidence = verdictOf(!truthful), "the host was told "+answerOf(c.res, c.err)
	case "answer.noop-unasked":
		passed := c.err == nil && c.res.Phase == rpc.PhaseNativeReturn && c.res.Code == rpc.NativeOK
		f.Verdict, f.Evidence = verdictOf(passed), "the host was told "+answerOf(c.res, c.err)
	case "answer.index-uuid":
		u := c.res.IndexUUID
		bad := strings.ContainsAny(u, "/\\\n\r\x00") || strings.Contains(u, "..") || u == hostile.UnsafeID
		f.Verdict, f.Evidence = verdictOf(c.err != nil || bad), "the host was told "+answerOf(c.res, c.err)
	case "answer.message-control":
		bad := unprintable(c.res.Message)
		f.Verdict = verdictOf(c.err != nil || len(bad) > 0 || strings.Contains(c.res.Message, "\n{"))
		f.Evidence = fmt.Sprintf("the host was told %s; unprintable characters in its message: %q", answerOf(c.res, c.err), bad)
	case "leak.gateway-key-forms":
		h.judgeLeak(c, f)
	case "log.forge-line":
		forged := 0
		for _, l := range strings.Split(h.e.logs.String(), "\n") {
			var entry map[string]any
			if json.Unmarshal([]byte(l), &entry) == nil && entry["@message"] == hostile.ForgedLogMessage {
				forged++
			}
		}
		f.Verdict = verdictOf(forged > 0)
		f.Evidence += fmt.Sprintf("; entries of the sidecar's log with that @message: %d", forged)
	case "answer.linger":
		h.judgeLinger(c, f)
	case "process.orphan", "cgroup.escape":
		suffix := map[string]string{"process.orphan": ":orphan", "cgroup.escape": ":escape"}[f.Attack]
		var alive []string
		for _, s := range x.survivors {
			if strings.HasSuffix(s, suffix) {
				alive = append(alive, s)
			}
		}
		outsideSaw(f, len(alive) > 0)
		f.Evidence += fmt.Sprintf("; after the answer, alive: %v", alive)
	case "sidecar.stdin-inject":
		if x.injected > 0 {
			f.Verdict = hostile.Succeeded
		}
		f.Evidence += fmt.Sprintf("; the sidecar answered %v more objects.status requests than the test sent", x.injected)
	case "sidecar.stdout-forge":
		f.Evidence += "; the host was told " + answerOf(c.res, c.err)
	case "victim.forge-result":
		f.Evidence += fmt.Sprintf("; the victim's host was told %s %d %q", x.victim.Phase, x.victim.Code, x.victim.Message)
	case "net.connect", "net.connect-other-addrs", "net.udp", "net.unix-host", "net.unix-abstract":
		got := h.heard.of(c.inv)
		outsideSaw(f, len(got) > 0)
		f.Evidence += fmt.Sprintf("; the test's listeners heard %q", got)
	case "gateway.connection-flood":
		if x.fdPeak-x.fdBase > connectionBound {
			f.Verdict = hostile.Succeeded // whatever the engine could tell
		}
		f.Evidence += fmt.Sprintf("; the sidecar's descriptors: %d before, at most %d during the invocation (+%d; bound +%d), of a hard limit of %s",
			x.fdBase, x.fdPeak, x.fdPeak-x.fdBase, connectionBound, nofileHard(h.e.c.Pid()))
	case "store.gateway-key":
		h.judgeHandoff(f)
	case "secrets.request":
		h.judgeSecrets(f)
	case "progress.flood-size":
		longest := 0
		for _, n := range h.notesOf(c.inv) {
			longest = max(longest, len(n.p.Stage))
		}
		f.Verdict = verdictOf(longest > 1024)
		f.Evidence += fmt.Sprintf("; the longest stage the host got: %d bytes (bound 1 KiB)", longest)
	case "progress.flood-rate":
		notes := h.notesOf(c.inv)
		peak := peakPerSecond(notes)
		f.Verdict = verdictOf(peak > 12)
		f.Evidence += fmt.Sprintf("; the host got %d notifications, at most %d in one second (ENGINE.md: 10 a second)", len(notes), peak)
	}
}

// nofileHard is process pid's hard RLIMIT_NOFILE, from /proc/<pid>/limits.
func nofileHard(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); strings.HasPrefix(l, "Max open files") && len(f) >= 5 {
			return f[4]
		}
	}
	return "?"
}

// outsideSaw sets the verdict of an attack whose effect the test looked for from outside: seen,
// it succeeded whatever the engine thought; unseen, a pending one was blocked.
func outsideSaw(f *hostile.Finding, seen bool) {
	if seen {
		f.Verdict = hostile.Succeeded
	} else if f.Verdict == hostile.Pending {
		f.Verdict = hostile.Blocked
	}
}

// judgeLeft checks what an attack left: host paths must be gone, store keys unchanged, and a
// claim it aimed at may only be the sidecar's fence.
func (h *hostileRun) judgeLeft(f *hostile.Finding, x judgeFacts) {
	var ev []string
	looked := 0
	for _, l := range f.Left {
		switch {
		case strings.HasPrefix(l, "marker:"):
			continue // a process: judgeOne looked for it
		case strings.HasPrefix(l, "key:"):
			k := strings.TrimPrefix(l, "key:")
			if x.before == nil {
				continue
			}
			looked++
			if d := changed(x.before, x.after, k); d != "" {
				f.Verdict = hostile.Succeeded
				ev = append(ev, d)
			}
		case strings.HasPrefix(l, "claim:"):
			looked++
			k := strings.TrimPrefix(l, "claim:")
			b, err := storage.ReadAll(context.Background(), h.st, k, 4096)
			var claim struct {
				Kind string `json:"kind"`
			}
			if err == nil && (json.Unmarshal(b, &claim) != nil || claim.Kind != "fence") {
				f.Verdict = hostile.Succeeded
				ev = append(ev, fmt.Sprintf("%s holds a %q claim", k, claim.Kind))
			}
		default:
			looked++
			_, err := os.Lstat(l)
			if err == nil {
				f.Verdict = hostile.Succeeded
				ev = append(ev, l+" is on the host")
			} else if f.Verdict == hostile.Pending && errors.Is(err, os.ErrNotExist) {
				f.Verdict = hostile.Blocked
			}
		}
	}
	if f.Verdict == hostile.Pending && looked > 0 && looked == len(f.Left) && len(ev) == 0 {
		f.Verdict = hostile.Blocked // every key and path it left was looked at and found unchanged
	}
	if len(ev) > 0 {
		f.Evidence += "; outside: " + strings.Join(ev, ", ")
	} else if looked > 0 {
		f.Evidence += fmt.Sprintf("; outside: the %d keys and paths it aimed at are unchanged", looked)
	}
}

// judgeDigest names the secrets an attack read.
func (h *hostileRun) judgeDigest(f *hostile.Finding) {
	ds := strings.Split(f.Digest, ",")
	switch {
	case strings.HasPrefix(f.Attack, "victim.") && slices.Contains(ds, hostile.Digest(h.victimSecret)):
		f.Evidence += "; it read the other worker's secret"
	case slices.Contains(ds, hostile.Digest(h.sidecarSecret)):
		f.Evidence += "; it read the sidecar's own S3 secret"
	}
	if b, err := os.ReadFile(h.credFile); err == nil && f.Digest == hostile.Digest(string(b)) {
		f.Evidence += "; it read the credentials file"
	}
}

// judgeSecrets: none of the strings the engine was given is the call's, the sidecar's or
// MinIO's key.
func (h *hostileRun) judgeSecrets(f *hostile.Finding) {
	srv := testminio.Shared(h.t)
	secrets := map[string]string{"the call's secret key": h.callSecret, "the sidecar's secret key": h.sidecarSecret,
		"MinIO's secret key": srv.SecretKey, "MinIO's access key": srv.AccessKey}
	if h.creds != nil {
		secrets["the call's access key"] = h.creds.AccessKey
	}
	ds := strings.Split(f.Digest, ",")
	var found []string
	for name, s := range secrets {
		if s != "" && slices.Contains(ds, hostile.Digest(s)) {
			found = append(found, name)
		}
	}
	slices.Sort(found)
	f.Verdict = verdictOf(len(found) > 0)
	f.Evidence += fmt.Sprintf("; of the call's, the sidecar's and MinIO's keys, the engine was given: %v", found)
	f.Digest = ""
}

// judgeHandoff tries the engine's gateway key at MinIO: it must be good nowhere but its gateway.
func (h *hostileRun) judgeHandoff(f *hostile.Finding) {
	b, err := hex.DecodeString(f.Handoff)
	if err != nil || f.Handoff == "" {
		f.Verdict, f.Evidence = hostile.Inconclusive, fmt.Sprintf("no key handed over (%v)", err)
		return
	}
	slices.Reverse(b)
	ak, sk, _ := strings.Cut(string(b), "\x00")
	f.Handoff = ""
	srv := testminio.Shared(h.t)
	bucket := h.bucket
	if bucket == "" {
		bucket = "hostile-handoff"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := storage.OpenStore(ctx, storage.StoreConfig{Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: bucket, AccessKey: ak, SecretKey: sk, MaxRetries: 1})
	if err != nil {
		f.Verdict, f.Evidence = hostile.Blocked, "MinIO refused the gateway key at open: "+err.Error()
		return
	}
	perr := st.Put(ctx, "hostile-handoff-"+randID(""), strings.NewReader("x"), 1)
	var lerr error
	for _, err := range st.List(ctx, "") {
		lerr = err
		break
	}
	f.Verdict = verdictOf(perr == nil || lerr == nil)
	f.Evidence = fmt.Sprintf("with the gateway key at MinIO %s: put %v; list %v", srv.Endpoint, perr, lerr)
}

// judgeLeak looks for every form of the engine's gateway key (named by its digest) in the
// answer's message, the invocation's progress stages and the sidecar's log.
func (h *hostileRun) judgeLeak(c *hostileCall, f *hostile.Finding) {
	var where []string
	look := func(place, text string) {
		for _, form := range leakedForms(text, f.Digest) {
			where = append(where, form+" in "+place)
		}
	}
	look("the answer's message", c.res.Message)
	for _, n := range h.notesOf(c.inv) {
		look("a $/progress stage", n.p.Stage)
	}
	for _, l := range strings.Split(h.e.logs.String(), "\n") {
		if strings.Contains(l, c.inv) {
			look("the sidecar's log", workerLine(l))
		}
	}
	where = slices.Compact(where)
	f.Verdict = verdictOf(len(where) > 0)
	f.Evidence = fmt.Sprintf("forms of its key found: %v", where)
	f.Digest = ""
}

// leakedForms returns the forms ("exact", "hex", "spaced") of the secret of the given digest
// that text holds between the leak markers.
func leakedForms(text, digest string) []string {
	var out []string
	for _, m := range []struct{ name, marker string }{{"exact", hostile.LeakExact}, {"hex", hostile.LeakHex}, {"spaced", hostile.LeakSpaced}} {
		rest := text
		for {
			i := strings.Index(rest, m.marker)
			if i < 0 {
				break
			}
			rest = rest[i+len(m.marker):]
			j := strings.Index(rest, hostile.LeakEnd)
			if j < 0 {
				break
			}
			v := rest[:j]
			switch m.name {
			case "hex":
				b, err := hex.DecodeString(v)
				if err != nil {
					continue
				}
				v = string(b)
			case "spaced":
				v = strings.ReplaceAll(v, " ", "")
			}
			if hostile.Digest(v) == digest {
				out = append(out, m.name)
			}
		}
	}
	return out
}

// unprintable returns the characters of s a host must not get from an engine: control
// characters (C0, DEL, C1) and bidirectional overrides.
func unprintable(s string) []rune {
	var out []rune
	for _, r := range s {
		if unicode.IsControl(r) || r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 {
			out = append(out, r)
		}
	}
	return out
}

// peakPerSecond is the most notifications that arrived within any one second.
func peakPerSecond(notes []note) int {
	peak := 0
	for i := range notes {
		n := 0
		for j := i; j < len(notes) && notes[j].at.Sub(notes[i].at) < time.Second; j++ {
			n++
		}
		peak = max(peak, n)
	}
	return peak
}

// lingerBound is how long after its result an engine that keeps running may hold its
// executor: the result grace (2 s, PROTOCOL.md), the test sidecar's kill ladder (500 ms term
// grace) and 2.5 s for the reap and the answer on a busy 2-CPU machine.
const lingerBound = 5 * time.Second

// judgeLinger: the sidecar answered within the result grace and the kill ladder of the
// engine's result, not at the deadline (20 s).
func (h *hostileRun) judgeLinger(c *hostileCall, f *hostile.Finding) {
	if f.AtUnixMs == 0 || c.answeredAt.IsZero() {
		f.Verdict, f.Evidence = hostile.Inconclusive, "no answer time"
		return
	}
	took := c.answeredAt.Sub(time.UnixMilli(f.AtUnixMs))
	f.Verdict = verdictOf(took > lingerBound)
	f.Evidence = fmt.Sprintf("the host got %s %v after the engine's result (bound %v; the deadline was 20 s away)", answerOf(c.res, c.err), took.Round(10*time.Millisecond), lingerBound)
}

// afterWrites judges every write the lingering engine and its child made after the answer:
// none may be accepted, and none may be in the store once custody settled.
func (h *hostileRun) afterWrites(c *hostileCall, attempts []hostile.Finding, x judgeFacts) hostile.Finding {
	f := hostile.Finding{Attack: "answer.after-answer-writes", Tried: "after its result, the engine and a child PUT data keys, the manifest of pinned+1 and the version hint every 50 ms"}
	var answered int64
	for _, g := range c.findings {
		if g.Attack == "answer.linger" {
			answered = g.AtUnixMs
		}
	}
	var accepted []string
	tried := 0
	for _, a := range attempts {
		if a.AtUnixMs < answered {
			continue
		}
		tried++
		if a.Verdict == hostile.Succeeded {
			accepted = append(accepted, a.Evidence)
		}
		h.judgeLeft(&a, x)
		if a.Verdict == hostile.Succeeded && !slices.Contains(accepted, a.Evidence) {
			accepted = append(accepted, a.Evidence)
		}
	}
	f.Verdict = verdictOf(len(accepted) > 0)
	if len(accepted) > 5 {
		accepted = append(accepted[:5], fmt.Sprintf("… %d more", len(accepted)-5))
	}
	f.Evidence = fmt.Sprintf("%d writes tried after the answer, %d accepted or in the store: %v", tried, len(accepted), accepted)
	return f
}

// outsideUnchanged: nothing outside the hostile invocation's dataset (and the victim's) changed
// while it ran.
func (h *hostileRun) outsideUnchanged(before, after map[string]string) hostile.Finding {
	f := hostile.Finding{Attack: "store.outside-unchanged", Tried: "(the test) compare every object outside ds/ and victim/ before and after the main invocation"}
	var diffs []string
	keys := map[string]bool{}
	for k := range before {
		keys[k] = true
	}
	for k := range after {
		keys[k] = true
	}
	for k := range keys {
		if strings.HasPrefix(k, "ds/") || strings.HasPrefix(k, "victim/") {
			continue
		}
		if d := changed(before, after, k); d != "" {
			diffs = append(diffs, d)
		}
	}
	slices.Sort(diffs)
	f.Verdict = verdictOf(len(diffs) > 0)
	f.Evidence = fmt.Sprintf("%d objects compared; changed: %v", len(keys), diffs)
	return f
}

// orphans: once custody settled the failed invocation, it left no object of its own under its
// dataset (claims excepted: the sidecar's permanent records, a fence for a failed invocation),
// and every object that was there is unchanged.
func (h *hostileRun) orphans(inv string, before, after map[string]string) hostile.Finding {
	f := hostile.Finding{Attack: "custody.orphans", Tried: "(the test) after custody settled the main invocation, look for objects it left under ds/ and objects of ds/ it changed"}
	var left []string
	for k := range after {
		if strings.HasPrefix(k, "ds/_steward/claims/") {
			continue
		}
		if d := changed(before, after, k); strings.HasPrefix(k, "ds/") && d != "" {
			left = append(left, d)
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok && strings.HasPrefix(k, "ds/") {
			left = append(left, k+" was deleted")
		}
	}
	slices.Sort(left)
	f.Verdict = verdictOf(len(left) > 0)
	if len(left) > 8 {
		left = append(left[:8], fmt.Sprintf("… %d more", len(left)-8))
	}
	f.Evidence = fmt.Sprintf("left or changed under ds/: %v", left)
	return f
}

// races runs the manifest PUT against index.resolve's fence twice: the PUT 400 ms after the
// announcement (the fence should win) and at once (either may). The outcome must be one: never
// a resolve NOT_COMMITTED beside an answer COMMITTED or a later resolve COMMITTED. (UNKNOWN is
// no contradiction: a claim whose manifest is absent stays unknown for storage/slot's grace.)
func (h *hostileRun) races(params map[string]string) []hostile.Finding {
	var out []hostile.Finding
	for i, delay := range []string{"400", "0"} {
		path := fmt.Sprintf("race%d", i+1)
		ps := map[string]string{}
		for k, v := range params {
			ps[k] = v
		}
		ps[hostile.ParamRaceDelay] = delay
		var first rpc.ResolveResult
		var firstErr error
		c := h.mutate(path, hostile.ModeRace, ps, func(inv string) {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
				if fs, _ := h.findings(inv); slices.ContainsFunc(fs, func(f hostile.Finding) bool { return f.Attack == "race.ready" }) {
					first, firstErr = h.resolveOf(inv, path)
					return
				}
			}
			firstErr = errors.New("race.ready never came")
		}, 30*time.Second)
		c.findings = h.settle(c.inv)
		second, secondErr := h.resolveOf(c.inv, path)
		for _, f := range c.findings {
			switch f.Attack {
			case "gateway.race-fence":
				f.Attack += "/delay-" + delay + "ms"
				h.judgeRace(c, &f, first, firstErr, second, secondErr)
				out = append(out, f)
			case "gateway.concurrent-commit":
				f.Attack += "/delay-" + delay + "ms"
				out = append(out, f)
			}
		}
	}
	return out
}

func (h *hostileRun) judgeRace(c *hostileCall, f *hostile.Finding, first rpc.ResolveResult, firstErr error, second rpc.ResolveResult, secondErr error) {
	committed := c.err == nil && c.res.Phase == rpc.PhaseNativeReturn && c.res.Code == rpc.NativeOK && c.res.CompletionReason == rpc.CompletionCommitted
	v, _ := dataset.LatestVersion(context.Background(), h.st, c.path)
	_, statErr := h.st.Stat(context.Background(), fmt.Sprintf("%s/_versions/%020d.manifest", c.path, 2))
	landed := statErr == nil
	var wrong []string
	if firstErr != nil || secondErr != nil {
		wrong = append(wrong, fmt.Sprintf("resolve failed: %v / %v", firstErr, secondErr))
	}
	said := []string{first.Outcome, second.Outcome}
	if slices.Contains(said, rpc.OutcomeNotCommitted) && (committed || slices.Contains(said, rpc.OutcomeCommitted)) {
		wrong = append(wrong, "resolve said NOT_COMMITTED and the commit was reported")
	}
	if committed && (!landed || second.Outcome != rpc.OutcomeCommitted) {
		wrong = append(wrong, "answered COMMITTED without the manifest and a resolve that agrees")
	}
	if landed && second.Outcome != rpc.OutcomeCommitted {
		wrong = append(wrong, "the manifest is in the store and resolve does not say COMMITTED")
	}
	f.Verdict = verdictOf(len(wrong) > 0)
	f.Evidence += fmt.Sprintf("; resolve during the PUT: %s (fenced %v), the host was told %s, resolve after: %s; manifest of version 2 in the store: %v (latest version %d); inconsistent: %v",
		first.Outcome, first.Fenced, answerOf(c.res, c.err), second.Outcome, landed, v, wrong)
}

// alias has the hostile engine commit version 2 of "alias" under a name the dataset's readers
// never look for, then the built-in engine commit version 2 as an honest writer: two answers
// COMMITTED at one version, or a COMMITTED the dataset does not show, is the attack's success.
func (h *hostileRun) alias(params map[string]string) []hostile.Finding {
	c := h.mutate("alias", hostile.ModeAlias, params, nil, 20*time.Second)
	c.findings = h.settle(c.inv)
	inv := randID("honest-")
	p := h.e.params(inv, "alias", 1, rpc.OpCreate, "ix", "name", rpc.IndexBTree)
	p.Dataset.Store, p.Credentials = h.store, h.creds
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	honest, herr := h.e.c.Mutate(ctx, p)
	h.waitCustody()
	v, verr := dataset.LatestVersion(context.Background(), h.st, "alias")
	r, rerr := h.resolveOf(c.inv, "alias")
	var out []hostile.Finding
	for _, f := range c.findings {
		if f.Attack != "gateway.manifest-alias" {
			continue
		}
		claimed := c.err == nil && c.res.Phase == rpc.PhaseNativeReturn && c.res.Code == rpc.NativeOK && c.res.CommittedVersion == 2
		honestCommitted := herr == nil && honest.Phase == rpc.PhaseNativeReturn && honest.Code == rpc.NativeOK && honest.CommittedVersion == 2
		f.Verdict = verdictOf(claimed || r.Outcome == rpc.OutcomeCommitted)
		f.Evidence += fmt.Sprintf("; the host was told %s; index.resolve %s (%v); then the built-in engine at pinned 1 was told %s (committed at 2: %v); the dataset's latest version %d (%v)",
			answerOf(c.res, c.err), r.Outcome, rerr, answerOf(honest, herr), honestCommitted, v, verr)
		if claimed && honestCommitted {
			f.Evidence += " — two invocations told COMMITTED at version 2"
		}
		out = append(out, f)
	}
	return out
}

// required are the attacks every run must report.
func (h *hostileRun) required() []string {
	names := []string{"identity.host-root", "identity.capabilities", "identity.read-shadow", "identity.chown-foreign",
		"identity.rlimit-raise", "identity.proc-sys-write", "ns.mnt", "ns.net", "ns.pid", "ns.user", "ns.ipc", "ns.uts", "ns.cgroup",
		"ns.find-sidecar", "victim.mem", "victim.process-vm-readv", "victim.ptrace-seize", "victim.sigstop", "victim.forge-result",
		"sidecar.environ", "sidecar.mem", "sidecar.process-vm-readv", "sidecar.ptrace-seize", "sidecar.pidfd-getfd", "sidecar.sigstop",
		"sidecar.signal-any", "sidecar.stdin-inject", "sidecar.stdout-forge", "cgroup.raise-memory", "cgroup.raise-pids", "cgroup.escape",
		"process.orphan", "process.inherited-fds", "nnp.children", "nnp.builtin-worker-threads", "seccomp.ptrace", "seccomp.process_vm_readv", "seccomp.mount", "seccomp.bpf",
		"seccomp.perf_event_open", "seccomp.kexec_load", "seccomp.init_module", "seccomp.keyctl", "seccomp.setns",
		"seccomp.unshare-user", "seccomp.io_uring_setup", "seccomp.userfaultfd",
		"fs.write-state-dir", "fs.write-host-dir", "fs.write-tmp", "fs.read-credentials", "fs.read-state-dir", "fs.read-kcore",
		"fs.exec-shell", "fs.mknod-disk", "fs.exec-tmpdir", "fs.exec-memfd", "fs.setuid-fifo", "fs.tmpdir-quota",
		"net.connect", "net.connect-other-addrs", "net.udp", "net.bind-listen", "net.interfaces", "net.vsock", "net.packet",
		"net.i386-socket", "net.unix-host", "net.unix-abstract",
		"store.root-visible", "fs.write-store-root", "store.direct", "store.gateway-key", "secrets.request", "store.outside-unchanged", "custody.orphans",
		"custody.reserve-foreign-manifest", "custody.reserve-foreign-data", "custody.reserve-own-manifest", "custody.reserve-own-data",
		"custody.reserve-prefix",
		"gateway.put-foreign-data", "gateway.put-foreign-manifest", "gateway.put-own-manifest-other-version", "gateway.forge-claim",
		"gateway.version-hint", "gateway.traversal", "gateway.read-foreign", "gateway.overwrite", "gateway.delete-foreign",
		"gateway.delete-objects", "gateway.copy-outside", "gateway.list-outside", "gateway.list-huge", "gateway.second-connection",
		"gateway.bytes-quota", "gateway.objects-quota", "gateway.flood", "gateway.connection-flood",
		"gateway.race-fence/delay-400ms", "gateway.race-fence/delay-0ms", "gateway.concurrent-commit/delay-400ms",
		"gateway.concurrent-commit/delay-0ms", "gateway.manifest-alias",
		"progress.flood-size", "progress.flood-rate",
		"answer.claim-commit", "answer.noop-unasked", "answer.index-uuid", "answer.message-control", "leak.gateway-key-forms", "log.forge-line",
		"answer.linger", "answer.after-answer-writes"}
	if !h.onMinIO {
		names = append(names, "fs.write-other-dataset", "gateway.slowloris")
	}
	return names
}

// logTable logs the attack table (markdown) for the issue note.
func (h *hostileRun) logTable(fs []hostile.Finding) {
	var b strings.Builder
	b.WriteString("\n| attack | verdict | errno | evidence |\n|---|---|---|---|\n")
	n := 0
	for _, f := range fs {
		if f.Verdict != hostile.Blocked {
			n++
		}
		ev := strings.ReplaceAll(f.Evidence, "|", "/")
		if len(ev) > 400 {
			ev = ev[:400] + "…"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", f.Attack, f.Verdict, f.Errno, ev)
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
			if !strings.HasPrefix(l, "/") {
				continue // a process marker or a store key
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
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
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
