package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
)

// maxWorkerFrames bounds the frames one worker may send (progress is throttled to 10/s by a
// well-behaved worker, so this is hours of progress); beyond it the worker is flooding.
const maxWorkerFrames = 100_000

// exitDrain is how long frames are still read after the worker's main process exited.
const exitDrain = 200 * time.Millisecond

// resultGrace is how long a worker that sent its result may take to exit by itself.
const resultGrace = 2 * time.Second

// session is the sidecar's side of one worker's protocol.
type session struct {
	s      *Server
	j      *job
	dom    *isolation.Domain
	toW    *os.File // sidecar → worker
	frames chan frameOrErr

	tempDir    string // the domain's private temp dir (temp_dir in the request)
	requested  bool   // the request frame was written: from here on, the engine may have run
	reserveSeq uint64 // the last reserve's seq: they count 1, 2, … in order
	result     *workerproto.Result
	violation  string
	deadline   bool
	cancelled  bool // index.cancel ended the session (cancel.go)
	progress   *progressSender
	fromSpare  bool               // the domain is the executor's spare
	gw         *invocationGateway // the invocation's storage gateway, opened with the request
	gwErr      error              // why the gateway could not be opened: the request was never sent
	logw       *workerLog
	logged     bool // "worker assigned" is written

	requestedAt, resultAt time.Time // when the request frame was written, the result read (timing)
}

// logAssigned writes the "worker assigned" line once. A spare's is written right
// after the request frame, while the worker works on it rather than before (the line cost
// 0.07–0.2 ms of a spare's no-op answer path), or when the session ends without a request;
// a fresh launch's at once, while the worker starts.
func (ss *session) logAssigned() {
	if !ss.logged {
		ss.logged = true
		ss.s.jobLog(ss.j).Info("worker assigned", "domain", ss.dom.ID(), "prestarted", ss.fromSpare)
	}
}

type frameOrErr struct {
	f   *workerproto.Frame
	err error
}

// launch starts one domain of engine e with options o and a fresh private temp dir; its
// frames are read in the background. A contained domain has a network namespace of its own
// whose only reachable address is its storage gateway's listener (handed to the sidecar at
// birth, served once a request arrives: openGateway), so any domain may serve any dataset, and
// nothing of a store is reachable from it: no folder, no credential, no route.
func (s *Server) launch(e *engine, id string, o launchOptions) (_ *worker, retErr error) {
	tmp, err := os.MkdirTemp(s.tempDir, "steward-"+domainID(id)+"-")
	if err != nil {
		return nil, fmt.Errorf("private temp dir: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	toWR, toWW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromWR, fromWW, err := os.Pipe()
	if err != nil {
		toWR.Close()
		toWW.Close()
		return nil, err
	}
	logw := newWorkerLog(s.log.Named("engine").Named(e.name))
	path, args := s.command(e)
	env := append(slices.Clip(s.cfg.WorkerEnv), "TMPDIR="+tmp, "HOME="+tmp)
	var port uint16
	if s.contained() {
		port = gatewayPort
	}
	dom, err := s.iso.Start(context.Background(), isolation.Spec{
		ID: domainID(id), Path: path, Args: args, Env: env,
		ExtraFiles: []*os.File{toWR, fromWW}, Stderr: logw, MemoryLimit: o.memory, PidsLimit: o.pids,
		TempDir: tmp, Gateway: port, Policy: workerproto.EngineReach(e.argv), CPUs: o.cpus,
	})
	toWR.Close() // the worker holds its own copies now
	fromWW.Close()
	if err != nil {
		toWW.Close()
		fromWR.Close()
		return nil, err
	}
	w := &worker{eng: e, dom: dom, toW: toWW, fromW: fromWR, frames: make(chan frameOrErr, 16), logw: logw, tempDir: tmp}
	go readFrames(fromWR, w.frames)
	return w, nil
}

// contained reports whether worker domains are born contained.
func (s *Server) contained() bool { return s.iso != nil && s.iso.Contained() }

// invoke runs j on the spare when it fits (the configured limits, j's engine, still alive), else
// on a fresh worker; runs the protocol; brings the domain down, reaped and removed; and only then
// returns the classified answer. It consumes spare either way.
func (s *Server) invoke(j *job, spare *worker) rpc.MutateResult {
	start := time.Now()
	j.launched = start
	s.spares.follow(j.eng) // the next spares are born for calls like this one
	w := s.spares.claim(spare, j.eng, j.limits, j.p.InvocationID)
	if w == nil {
		g, res, ok := s.awaitBudget(j, s.memoryOf(j.limits))
		if !ok {
			return res
		}
		var err error
		if w, err = s.launch(j.eng, j.p.InvocationID, j.limits); err != nil {
			g.release()
			s.log.Error("worker launch failed", "invocation", j.p.InvocationID, "error", err)
			return launchFailed(err)
		}
		w.grant = g
	}
	defer w.toW.Close()
	defer w.fromW.Close()
	// The frame reader may be blocked handing over frames nobody reads any more (a flood, a
	// violation): drain them until it sees the closed pipe and stops.
	defer func() {
		go func() {
			for range w.frames {
			}
		}()
	}()
	w.logw.bind(j.p.InvocationID, rpc.TraceID(j.p.TraceParent), j.p.Credentials, s.ownSecrets()...)
	ss := &session{s: s, j: j, dom: w.dom, toW: w.toW, frames: w.frames, tempDir: w.tempDir, logw: w.logw,
		progress: newProgressSender(j.peer, j.p.InvocationID, j.p.TraceParent, s.callSecrets(j.p.Credentials)), fromSpare: w == spare}
	defer ss.progress.stop()
	if !ss.fromSpare {
		ss.logAssigned()
	}
	ss.run()
	ss.logAssigned() // if no request was written
	out, release := ss.teardown()
	down := time.Now()
	// The domain is dead and reaped: its gateway, closed now, is final — nothing of the
	// invocation can start or land any more — and decides the outcome with storage.
	rec := ss.gw.close()
	// The domain is dead and reaped: nothing can still write into its temp dir (lance#8992
	// leaves IVF shuffle files there even on success). It goes after the answer, behind the
	// namespaces: the held mount namespace has the dir mounted, and an rmdir there detaches that
	// mount and waits out an expedited RCU grace period (the answer's path paid ~30 µs for the
	// removal and the worker's exit ~0.1 ms more for its mount namespace's end, measured).
	tmp, g := w.tempDir, w.grant
	j.afterAnswer = func() {
		release()
		if err := os.RemoveAll(tmp); err != nil {
			s.log.Error("removing the domain's temp dir failed", "invocation", j.p.InvocationID, "error", err)
		}
		g.release() // its namespaces, and the tmpfs in its mount namespace, are gone
	}
	res := ss.classify(out)
	// A cancel that killed the worker before its result names the answer; one that came after
	// the result only cut its grace short.
	killed := ss.cancelled && ss.result == nil
	j.cx.byCancel = killed
	if ss.requested {
		v, err := s.decide(j, rec)
		if killed {
			v, err = s.settleCancelled(j, rec, v, err)
		}
		if err == nil {
			j.outcome, j.cx.decided = v.Outcome, true
		}
		res = s.confirmed(j, res, v, err)
		if killed {
			res = s.cancelledAnswer(j, res, v, err)
		}
	} else {
		j.outcome = slot.NotCommitted // the request never reached the engine
	}
	res.WallMs = time.Since(start).Milliseconds()
	ss.logTiming(start, down, rec)
	return res
}

// logTiming writes where the invocation's time went, at debug level: from its receipt to the
// executor (queued), to the request frame (launch or thaw, gateway, request), the engine's
// work to its result, its exit and teardown, and the outcome's decision from storage.
func (ss *session) logTiming(start, down time.Time, rec gateway.Record) {
	log := ss.s.jobLog(ss.j)
	if !log.IsDebug() {
		return
	}
	ms := func(a, b time.Time) float64 {
		if a.IsZero() || b.IsZero() {
			return -1
		}
		return float64(b.Sub(a).Microseconds()) / 1000
	}
	log.Debug("invocation timing", "prestarted", ss.fromSpare,
		"queued_ms", ms(ss.j.received, start), "to_request_ms", ms(start, ss.requestedAt),
		"engine_ms", ms(ss.requestedAt, ss.resultAt), "teardown_ms", ms(ss.resultAt, down),
		"decide_ms", ms(down, time.Now()), "gateway_requests", rec.Requests, "gateway_bytes", rec.Bytes)
}

func launchFailed(err error) rpc.MutateResult {
	return rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonLaunchFailed,
		Message: "worker launch failed: " + err.Error()}
}

func readFrames(r *os.File, out chan<- frameOrErr) {
	defer close(out)
	for {
		f, err := workerproto.Read(r, workerproto.MaxWorkerFrame)
		out <- frameOrErr{f: f, err: err}
		if err != nil {
			return
		}
	}
}

// run drives the protocol until the worker has answered, broken protocol, died, hit the
// deadline or been cancelled. It never blocks on the worker beyond those events.
func (ss *session) run() {
	timer := time.NewTimer(time.Until(ss.j.runUntil))
	defer timer.Stop()
	count := 0
	// Once the worker's main process has exited, frames it wrote are still read for a moment;
	// after that the session ends even if a descendant holds the pipe open.
	exited := ss.dom.Done()
	var drained, answered <-chan time.Time
	for {
		if isClosed(ss.j.cx.requested) {
			// Ahead of any frame that is also ready: a cancel that came before the worker's
			// hello keeps the request from being written at all.
			ss.cancelled = true
			return
		}
		select {
		case <-ss.j.cx.requested:
			ss.cancelled = true
			return
		case <-exited:
			exited, drained = nil, time.After(exitDrain)
		case <-drained:
			return
		case <-answered:
			return // answered, and still holding its pipe open past the grace: teardown kills it
		case fe, ok := <-ss.frames:
			if !ok || fe.err != nil {
				if ok && (errors.Is(fe.err, workerproto.ErrMalformed) || errors.Is(fe.err, workerproto.ErrFrameTooLarge)) {
					ss.violation = fe.err.Error()
				}
				return // worker closed its pipe: it exited or is exiting
			}
			if count++; count > maxWorkerFrames {
				ss.violation = fmt.Sprintf("flood: more than %d frames", maxWorkerFrames)
				return
			}
			if done := ss.handle(fe.f); done {
				return
			}
			if ss.result != nil && answered == nil {
				answered = time.After(resultGrace)
			}
		case <-timer.C:
			ss.deadline = true
			return
		}
	}
}

// handle processes one frame; done ends the session.
func (ss *session) handle(f *workerproto.Frame) (done bool) {
	switch {
	case f.T == workerproto.TypeHello && !ss.requested:
		if f.Pid != ss.dom.WorkerPid() {
			ss.violation = fmt.Sprintf("hello from pid %d, worker is %d", f.Pid, ss.dom.WorkerPid())
			return true
		}
		if err := f.Engine.Check(); err != nil || f.Engine.Settle != ss.j.eng.decl.Settle {
			ss.violation = fmt.Sprintf("hello of engine %s does not match its registration (settle %q, registered %q): %v",
				ss.j.eng.name, f.Engine.Settle, ss.j.eng.decl.Settle, err)
			return true
		}
		// The engine reaches its dataset through its gateway only, with a key good there alone;
		// the call's store and keys (or the sidecar's) stay in the sidecar.
		gw, err := ss.s.openGateway(ss.j, ss.dom)
		if err != nil {
			ss.gwErr = err
			return true
		}
		ss.gw = gw
		ss.logw.redactAlso(gw.creds.AccessKey, gw.creds.SecretKey)
		ss.progress.redactAlso(gw.creds.AccessKey, gw.creds.SecretKey)
		req := workerproto.NewMutateRequest(ss.j.p, gw.reach, gw.creds, ss.tempDir)
		frame, err := workerproto.NewRequest(workerproto.KindMutate, req)
		if err == nil {
			err = workerproto.Write(ss.toW, frame, workerproto.MaxRequestFrame)
		}
		if errors.Is(err, workerproto.ErrFrameTooLarge) {
			ss.violation = "request frame too large: " + err.Error() // nothing was written
			return true
		}
		ss.requested = true // from here a partial write may have reached the worker
		ss.requestedAt = time.Now()
		ss.logAssigned()
		if err != nil {
			ss.violation = "request write failed: " + err.Error()
			return true
		}
	case f.T == workerproto.TypeProgress && ss.requested && ss.result == nil:
		ss.progress.send(f.Stage, f.Done, f.Total)
	case f.T == workerproto.TypeReserve && ss.requested && ss.result == nil:
		if ss.reserveSeq++; f.Seq != ss.reserveSeq {
			ss.violation = fmt.Sprintf("reserve seq %d, want %d", f.Seq, ss.reserveSeq)
			return true
		}
		// Custody is taken by the gateway as each object is written (ENGINE.md §6): a reserve
		// frame is granted without effect, for engines written before the gateway.
		answer := &workerproto.Frame{T: workerproto.TypeReserved, Seq: f.Seq}
		if err := workerproto.Write(ss.toW, answer, workerproto.MaxRequestFrame); err != nil {
			ss.violation = "reserve answer write failed: " + err.Error()
			return true
		}
	case f.T == workerproto.TypeResult && ss.requested && ss.result == nil:
		ss.result = f.Result
		ss.resultAt = time.Now()
		ss.gw.seal() // its last word: a lingering process of the domain writes nothing more
		ss.s.log.Debug("worker result", "invocation", ss.j.p.InvocationID, "phase", f.Result.Phase, "code", f.Result.Code, "created", len(f.Result.Created))
		return false // keep reading: a second result or garbage after it is still a violation
	default:
		ss.violation = fmt.Sprintf("unexpected %q frame (requested=%v, result=%v)", f.T, ss.requested, ss.result != nil)
		return true
	}
	return false
}

// teardown brings the domain down: a worker that answered cleanly has had resultGrace to exit by
// itself (run) and is killed if it is still there; a deadline or a cancel gets the full ladder
// (SIGTERM, grace, SIGKILL); a protocol violation is killed at once. It returns only when the domain is dead, reaped and its cgroups are removed.
//
// The domain's empty namespaces stay held (isolation.Domain.CloseHolding): release, which the
// executor calls once the answer is written, lets the kernel destroy them.
func (ss *session) teardown() (isolation.Outcome, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), ss.s.cfg.Isolation.TermGrace+ss.s.cfg.Isolation.ReapBound)
	defer cancel()
	var out isolation.Outcome
	var err error
	switch {
	case ss.violation != "":
		out, err = ss.dom.Kill(ctx)
	case ss.deadline, ss.cancelled && ss.result == nil:
		out, err = ss.dom.Terminate(ctx) // a cancel is the deadline's ladder, sooner
	default:
		// It answered, or it is gone: what is left of it has had its grace (run waits up to
		// resultGrace after an answer) and is killed, not asked (an exited domain is not signalled).
		out, err = ss.dom.Kill(ctx)
	}
	for attempt := 0; errors.Is(err, isolation.ErrReapBound) && attempt < 3; attempt++ {
		ss.s.log.Warn("domain not yet reaped; killing again", "invocation", ss.j.p.InvocationID, "survivors", out.Survivors)
		out, err = ss.dom.Kill(context.Background())
	}
	if err != nil {
		ss.s.log.Error("domain teardown incomplete", "invocation", ss.j.p.InvocationID, "error", err)
	}
	release, cerr := ss.dom.CloseHolding()
	if cerr != nil {
		ss.s.log.Error("removing the domain's cgroups failed", "invocation", ss.j.p.InvocationID, "error", cerr)
	}
	return out, release
}

// engineRedact removes from an engine's text the call's and the sidecar's keys and the engine's
// own gateway key (which dies with the invocation, but is a credential all the same).
func (ss *session) engineRedact(msg string) string {
	secrets := ss.s.callSecrets(ss.j.p.Credentials)
	if ss.gw != nil {
		secrets = append(secrets, ss.gw.creds.AccessKey, ss.gw.creds.SecretKey)
	}
	return redact(msg, secrets)
}

// classify turns what happened into the single answer, from typed facts only.
func (ss *session) classify(out isolation.Outcome) rpc.MutateResult {
	res := rpc.MutateResult{
		WallMs: out.Wall.Milliseconds(), PeakMemoryBytes: out.PeakMemory, OOMKilled: out.OOMKilled, Signal: out.SignalName,
	}
	switch {
	case ss.result != nil && ss.violation == "":
		r := ss.result
		res.Phase, res.Code = r.Phase, r.Code
		res.ObservedLatestVersion, res.CommittedVersion = r.ObservedLatest, r.CommittedVersion
		res.CompletionReason, res.Message, res.IndexUUID = r.CompletionReason, engineText(ss.engineRedact(r.Message), maxEngineText), r.IndexUUID
	case !ss.requested:
		// The request never reached the worker: nothing can have run.
		res.Phase, res.Code = rpc.PhasePreInvocationRejected, rpc.ReasonLaunchFailed
		res.Message = "the worker ended before it received the request"
		if ss.gwErr != nil {
			res.Code = rpc.ReasonDatasetUnavailable
			res.Message = errNoGateway.Error() + ": " + ss.s.sanitize(ss.j, ss.gwErr.Error())
		}
		if ss.violation != "" {
			res.Code, res.Message = rpc.ReasonInvalidRequest, "the request never reached the worker: "+ss.s.sanitize(ss.j, ss.violation)
		}
		if ss.deadline {
			res.Code, res.Message = rpc.ReasonDeadlineLapsed, "the worker did not start before the deadline"
		}
		if ss.cancelled {
			res.Code, res.Message = rpc.ReasonCancelled, "cancelled by index.cancel before the request reached the worker: nothing ran"
		}
	default:
		res.Phase, res.Code = rpc.PhaseIndeterminate, rpc.ReasonWorkerLost
		switch {
		case ss.violation != "":
			res.Message = "protocol violation: " + ss.s.sanitize(ss.j, ss.violation)
		case ss.deadline:
			res.Code, res.Message = rpc.ReasonDeadline, "the deadline ended the worker"
		case ss.cancelled:
			// Replaced by what storage says once the slot is decided (cancelledAnswer).
			res.Code, res.Message = rpc.ReasonCancelUnsettled, "index.cancel ended the worker"
		case out.OOMKilled:
			res.Message = "the worker was OOM-killed"
		case out.SignalName != "":
			res.Message = "the worker died of " + out.SignalName
		default:
			res.Message = fmt.Sprintf("the worker exited with code %d without a result", out.ExitCode)
		}
		if ss.j.eng.builtin() {
			// Only the built-in engine's version chain is one the sidecar reads; for another
			// engine's format the latest version stays unknown (0).
			res.ObservedLatestVersion = ss.s.observeLatest(ss.j)
		}
	}
	return res
}

// domainID names a cgroup directory after its first purpose (an invocation id for a fresh launch,
// "spare" for a spare), within isolation's alphabet, made unique by a time suffix.
func domainID(inv string) string {
	b := []byte(inv)
	for i, c := range b {
		if c == ':' {
			b[i] = '_'
		}
	}
	if len(b) > 48 {
		b = b[:48]
	}
	return fmt.Sprintf("%s-%d", b, time.Now().UnixNano()%1e9)
}

// memoryOf is the memory limit of a domain launched with o: what its budget grant holds.
func (s *Server) memoryOf(o launchOptions) int64 {
	m, _ := s.cfg.Isolation.DomainLimits(o.memory, o.pids)
	return m
}
