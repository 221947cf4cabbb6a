// Package worker is the built-in Go engine: `steward worker`, re-executed by the sidecar through
// /proc/self/exe into its own worker domain. It hardens itself (isolation.EnterWorker) before it
// reads anything, and then speaks engine protocol v1 through sidecar/enginesdk like any other
// engine: it declares itself (builtin: BTREE and BITMAP, settle by fence), reads exactly one
// request, and for a mutation runs the prechecks on the pinned snapshot, makes exactly one call
// into the engine (storage/dataset) and writes exactly one result.
//
// The worker never imports the host side (host, plugin); it knows the sidecar only through its
// own pipes. Credentials arrive in the request frame and live only in memory.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"github.com/cba1309c/steward/storage/dataset"
)

// Mode runs the worker mode args name — "worker" (Main) or "engine-exec" (ExecEngine, the rest
// of args its command) — and returns its exit code; ok is false for any other args. Both
// executables that carry the modes, steward and steward-worker, dispatch through it, before
// they install any signal handler: a worker keeps SIGTERM's default action (the kill ladder's
// first stage ends it). Only the sidecar starts a worker mode, in a worker domain, with its
// protocol pipes on fds 3 and 4; a worker exits the moment it has answered, since the sidecar's
// own answer waits for it to be gone.
func Mode(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch args[0] {
	case "worker":
		return Main(), true
	case "engine-exec":
		return ExecEngine(args[1:]), true
	}
	return 0, false
}

// Main is `steward worker`: it returns the process exit code.
func Main() int {
	if err := isolation.EnterWorker(); err != nil {
		fmt.Fprintln(os.Stderr, "steward worker: refused:", err)
		return isolation.ExitRefused
	}
	// Contained, before hello: every call reaches its store through the domain's gateway, which
	// the launch's policy holds already, so a prestarted worker pays for it before its request
	// arrives (a no-op when it was not born contained).
	if err := isolation.Contain(isolation.Policy{}); err != nil {
		fmt.Fprintln(os.Stderr, "steward worker: refused:", err)
		return isolation.ExitRefused
	}
	c, err := enginesdk.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, "steward worker:", err)
		return 2
	}
	warmDecoders()
	return Run(context.Background(), c)
}

// warmDecoders builds encoding/json's per-type caches (the reflection over every struct's
// fields) for what a call decodes after its request arrives — the request itself and the
// dataset manifest — before hello, so that a prestarted worker pays for them while it waits:
// cold, they were ≈0.27 ms of a no-op's answer path. Marshaling a zero value builds the field
// caches of every type it reaches, which decoding shares.
func warmDecoders() {
	for _, v := range []any{&workerproto.MutateRequest{}, &dataset.Manifest{}} {
		_, _ = json.Marshal(v)
	}
}

// Run serves one invocation over c and returns the exit code.
func Run(ctx context.Context, c *enginesdk.Conn) int {
	if err := c.Hello(workerproto.Builtin()); err != nil {
		return 3
	}
	f, err := c.Request()
	if err != nil {
		fmt.Fprintln(os.Stderr, "steward worker:", err)
		return 4
	}
	if req, err := f.Mutate(); err == nil {
		if req.Fault == workerproto.FaultClaimCommit {
			_ = c.Result(&workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted,
				CommittedVersion: req.PinnedVersion + 1, ObservedLatest: req.PinnedVersion + 1})
			return 0
		}
		if exit, stop := earlyFault(c, req.Fault); stop {
			return exit
		}
	}
	return enginesdk.Answer(ctx, c, f, builtin{})
}

// builtin is the engine behind the SDK.
type builtin struct{}

var _ enginesdk.Engine = builtin{}

var errStale = errors.New("pinned version is gone and a newer one exists")
