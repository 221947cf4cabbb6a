package hostile

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// sendResult writes the result frame itself, past the SDK (which would redact and bound the
// message), and returns the write's error.
func (r *run) sendResult(res *workerproto.Result) error {
	return workerproto.Write(r.c.Out(), &workerproto.Frame{T: workerproto.TypeResult, Result: res}, workerproto.MaxWorkerFrame)
}

// answerAndExit sends res and ends the process (the SDK must not answer a second time).
func (r *run) answerAndExit(res *workerproto.Result) {
	r.emitDone()
	if err := r.sendResult(res); err != nil {
		fmt.Fprintln(os.Stderr, "hostile: result:", err)
		os.Exit(5)
	}
	os.Exit(0)
}

func (r *run) failure(code int, msg string) *workerproto.Result {
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: code, ObservedLatest: r.pinned, Message: msg}
}

// noop answers IF_EXISTS_NOOP to a request that did not ask for it (no if_exists).
func (r *run) noop() {
	r.emit(Finding{Attack: "answer.noop-unasked", Verdict: Pending,
		Tried:    fmt.Sprintf("answer NATIVE_RETURN 0 IF_EXISTS_NOOP to a %s with if_exists=%v", r.req.Op, r.req.IfExists),
		Evidence: "the test judges the sidecar's answer: it must not be NATIVE_RETURN 0"})
	r.answerAndExit(&workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, ObservedLatest: r.pinned,
		CompletionReason: rpc.CompletionIfExistsNoop, Message: "nothing to do"})
}

// badUUID answers with an index_uuid that is a path out of the dataset, with a newline.
func (r *run) badUUID() {
	r.emit(Finding{Attack: "answer.index-uuid", Verdict: Pending, Tried: fmt.Sprintf("answer with index_uuid %q", UnsafeID),
		Evidence: "the test judges the sidecar's answer: that index_uuid must not reach the host"})
	r.answerAndExit(&workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIndex, ObservedLatest: r.pinned,
		IndexUUID: UnsafeID, Message: "index built, not committed"})
}

// leakForms are its gateway secret key as is, in hex and spaced out, each between markers.
func (r *run) leakForms() string {
	if r.req.Credentials == nil {
		return ""
	}
	k := r.req.Credentials.SecretKey
	spaced := strings.Join(strings.Split(k, ""), " ")
	return LeakExact + k + LeakEnd + " " + LeakHex + hex.EncodeToString([]byte(k)) + LeakEnd + " " + LeakSpaced + spaced + LeakEnd
}

// message leaks its key's forms into progress stages and stderr, then answers a failure whose
// message holds them with control characters, a forged log line and bidirectional overrides.
func (r *run) message() {
	forms := r.leakForms()
	secret := ""
	if r.req.Credentials != nil {
		secret = r.req.Credentials.SecretKey
	}
	r.emit(Finding{Attack: "leak.gateway-key-forms", Verdict: Pending, Digest: Digest(secret),
		Tried:    "put its gateway secret key as is, in hex and spaced out into its message, its $/progress stages and its stderr",
		Evidence: "the test looks for every form in the answer, the progress notifications and the sidecar's log"})
	fmt.Fprintf(os.Stderr, "hostile stderr leak %s\n", forms)
	r.emit(Finding{Attack: "log.forge-line", Verdict: Pending,
		Tried:    "write whole JSON log entries of the sidecar's shape to stderr (after LF, after CR, after an over-long line), @message \"" + ForgedLogMessage + "\"",
		Evidence: "the test looks for such an entry at the top level of the sidecar's log"})
	entry := fmt.Sprintf(`{"@level":"error","@message":%q,"@module":"steward","invocation":%q}`, ForgedLogMessage, r.inv)
	fmt.Fprintf(os.Stderr, "x\n%s\n", entry)
	fmt.Fprintf(os.Stderr, "x\r%s\r\n", entry)
	fmt.Fprintf(os.Stderr, "%s%s\n", strings.Repeat("y", 4096), entry)
	for i := 0; i < 3; i++ {
		_ = workerproto.Write(r.c.Out(), &workerproto.Frame{T: workerproto.TypeProgress, Stage: "leak " + forms, Done: int64(i), Total: 3}, workerproto.MaxWorkerFrame)
		time.Sleep(150 * time.Millisecond)
	}
	r.emit(Finding{Attack: "answer.message-control", Verdict: Pending,
		Tried:    "answer a failure whose message holds ESC sequences, CR LF and a forged JSON log line, NUL, DEL, C1 and bidirectional overrides",
		Evidence: "the test judges the message the host got"})
	msg := "hostile failure\x1b[2J\x1b[31m red\r\n{\"@level\":\"error\",\"@message\":\"forged by hostile\",\"invocation\":\"" + r.inv +
		"\"}\n\u202egnp.exe\u202c nul\x00 del\x7f c1\u0085 " + forms
	r.answerAndExit(r.failure(rpc.NativeInternal, msg))
}

// lingerAfterAnswer answers, then keeps its pipes open and writes through the gateway, with a
// child doing the same: nothing written after the answer may land, and the sidecar must answer
// the host within its grace and kill ladder, not at the deadline.
func (r *run) lingerAfterAnswer() {
	if r.gw == nil {
		r.emit(Finding{Attack: "answer.linger", Verdict: Inconclusive, Evidence: errNoGateway.Error()})
		r.answerAndExit(r.failure(rpc.NativeInternal, "no gateway"))
	}
	args := []string{"after", r.gw.addr, r.gw.bucket, r.gw.ak, r.ds, r.inv, strconv.FormatInt(r.pinned, 10), "child"}
	cmd := helper(args...)
	cmd.Stderr = os.Stderr
	childErr := cmd.Start()
	at := time.Now().UnixMilli()
	r.emit(Finding{Attack: "answer.linger", Verdict: Pending, AtUnixMs: at,
		Tried:    "answer NATIVE_RETURN 5, then keep running with its pipes open (and a child too), writing through the gateway: data keys, the manifest of pinned+1 and the version hint",
		Evidence: fmt.Sprintf("answered at %d; child started: %v", at, errOK(childErr))})
	r.emitDone()
	if err := r.sendResult(r.failure(rpc.NativeIndex, "the hostile engine failed, and lingers")); err != nil {
		os.Exit(5)
	}
	os.Exit(afterAnswer(args[1:len(args)-1], "main"))
}

// afterAnswer is the helper "after ADDR BUCKET AK DATASET INV PINNED WHO" (and the lingering
// main process): for 30 s it writes through the gateway every 50 ms, reporting each attempt.
func afterAnswer(args []string, who string) int {
	if len(args) != 6 {
		return 2
	}
	pinned, _ := strconv.ParseInt(args[5], 10, 64)
	ds, inv := args[3], args[4]
	c := &s3raw{addr: args[0], bucket: args[1], ak: args[2]}
	var mu sync.Mutex
	report := func(f Finding) {
		b, _ := jsonMarshal(f)
		mu.Lock()
		fmt.Fprintf(os.Stderr, "%s%s\n", FindingPrefix, b)
		mu.Unlock()
	}
	time.Sleep(50 * time.Millisecond)
	manifest := ds + "/_versions/" + manifestName(pinned+1)
	for i := 0; i < 600; i++ {
		key := fmt.Sprintf("%s/data/hostile-after-%s-%03d-%s.bin", ds, who, i, inv)
		body := "after the answer"
		switch i % 4 {
		case 1:
			key, body = manifest, "hostile manifest written after the answer "+inv
		case 3:
			key, body = ds+"/_versions/latest_version_hint.json", fmt.Sprintf(`{"version":%d}`, pinned+1)
		}
		at := time.Now().UnixMilli()
		p := c.do("PUT", c.obj(key), nil, []byte(body))
		report(Finding{Attack: "answer.after-put", Verdict: verdict(p.ok()), AtUnixMs: at, Left: []string{"key:" + key},
			Tried: "PUT through the gateway after the answer (" + who + ")", Evidence: fmt.Sprintf("PUT %s: %v", key, p)})
		time.Sleep(50 * time.Millisecond)
	}
	return 0
}

// race announces race.ready (the test then resolves the invocation), waits, and PUTs the
// manifest of pinned+1 twice at once with different bytes on two connections.
func (r *run) race() {
	if r.gw == nil {
		r.emit(Finding{Attack: "gateway.race-fence", Verdict: Inconclusive, Evidence: errNoGateway.Error()})
		r.answerAndExit(r.failure(rpc.NativeInternal, "no gateway"))
	}
	key := r.ds + "/_versions/" + manifestName(r.pinned+1)
	r.emit(Finding{Attack: "race.ready", Verdict: Pending, AtUnixMs: time.Now().UnixMilli(), Tried: "announce the manifest PUT to the test, which resolves the invocation now"})
	time.Sleep(time.Duration(r.intParam(ParamRaceDelay)) * time.Millisecond)
	var a, b reply
	var wg sync.WaitGroup
	for i, out := range []*reply{&a, &b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &s3raw{addr: r.gw.addr, bucket: r.gw.bucket, ak: r.gw.ak}
			*out = c.do("PUT", c.obj(key), map[string]string{"If-None-Match": "*"}, []byte(fmt.Sprintf("hostile manifest %c of %s", 'A'+i, r.inv)))
			c.close()
		}()
	}
	wg.Wait()
	r.emit(Finding{Attack: "gateway.concurrent-commit", Verdict: verdict(a.ok() && b.ok()),
		Tried: "PUT the manifest of pinned+1 twice at once, different bytes, two connections", Evidence: fmt.Sprintf("A: %v, B: %v", a, b)})
	r.emit(Finding{Attack: "gateway.race-fence", Verdict: Pending, Left: []string{"key:" + key},
		Tried:    fmt.Sprintf("PUT the manifest of pinned+1 %s ms after announcing it while the test resolves the invocation (its fence)", r.p[ParamRaceDelay]),
		Evidence: fmt.Sprintf("A: %v, B: %v", a, b)})
	if a.ok() || b.ok() {
		r.answerAndExit(&workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted,
			CommittedVersion: r.pinned + 1, ObservedLatest: r.pinned + 1, Message: "the race's manifest landed"})
	}
	r.answerAndExit(r.failure(rpc.NativeCommitConflict, "the race's manifest was refused"))
}

// alias commits pinned+1 under a manifest name that is the same version to the gateway and no
// name the dataset's readers look for: "02.manifest", "2.manifest", Lance's V2 name.
func (r *run) alias() {
	if r.gw == nil {
		r.emit(Finding{Attack: "gateway.manifest-alias", Verdict: Inconclusive, Evidence: errNoGateway.Error()})
		r.answerAndExit(r.failure(rpc.NativeInternal, "no gateway"))
	}
	next := r.pinned + 1
	m := r.gw.do("GET", r.gw.obj(r.ds+"/_versions/"+manifestName(r.pinned)), nil, nil)
	var ev []string
	landed := ""
	for _, name := range []string{fmt.Sprintf("%02d.manifest", next), strconv.FormatInt(next, 10) + ".manifest",
		strconv.FormatUint(^uint64(0)-uint64(next), 10) + ".manifest"} {
		key := r.ds + "/_versions/" + name
		p := r.gw.do("PUT", r.gw.obj(key), map[string]string{"If-None-Match": "*"}, m.body)
		ev = append(ev, fmt.Sprintf("%s: %v", name, p))
		if p.ok() {
			landed = key
			break
		}
	}
	f := Finding{Attack: "gateway.manifest-alias", Verdict: Pending,
		Tried:    fmt.Sprintf("commit version %d under a name the dataset's readers never look for (02.manifest, %d.manifest, the V2 name), with the pinned manifest's bytes (read: %v)", next, next, m),
		Evidence: strings.Join(ev, "; ")}
	if landed != "" {
		f.Left = []string{"key:" + landed}
	}
	r.emit(f)
	if landed != "" {
		r.answerAndExit(&workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted,
			CommittedVersion: next, ObservedLatest: next, Message: "committed under " + landed})
	}
	r.answerAndExit(r.failure(rpc.NativeCommitConflict, "every alias was refused"))
}

// progressFlood sends progress frames past the SDK's throttle: 20 of 60 KB, then a small one
// every millisecond for 1.5 s. The test judges what reached the host.
func (r *run) progressFlood(_ context.Context) {
	big := strings.Repeat("S", 60<<10-256)
	sent := 0
	for i := 0; i < 20; i++ {
		if workerproto.Write(r.c.Out(), &workerproto.Frame{T: workerproto.TypeProgress, Stage: big, Done: int64(i), Total: 20}, workerproto.MaxWorkerFrame) == nil {
			sent++
		}
	}
	r.emit(Finding{Attack: "progress.flood-size", Verdict: Pending, Tried: "20 progress frames with stages of 60 KB (past the SDK)",
		Evidence: fmt.Sprintf("%d sent; the test judges the stages the host got", sent)})
	// Spread over 1.5 s (a burst the sidecar reads in one go would reach the host as its last
	// step only, whatever the bound): one frame every millisecond.
	start := time.Now()
	n := 0
	for ; n < 3000 && time.Since(start) < 1500*time.Millisecond; n++ {
		if workerproto.Write(r.c.Out(), &workerproto.Frame{T: workerproto.TypeProgress, Stage: "flood", Done: int64(n), Total: 3000}, workerproto.MaxWorkerFrame) != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	r.emit(Finding{Attack: "progress.flood-rate", Verdict: Pending, AtUnixMs: start.UnixMilli(), Tried: "a progress frame every millisecond for 1.5 s (past the SDK's throttle)",
		Evidence: fmt.Sprintf("%d sent in %v; the test judges the notifications' rate", n, time.Since(start).Round(time.Millisecond))})
}
