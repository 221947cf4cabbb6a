// Command testengine is a toy engine of engine protocol v1, written against the Go SDK
// (sidecar/enginesdk) as an engine outside steward would be, for the sidecar's end-to-end tests:
//
//	testengine --settle fence|claim-fence|none
//
// It builds index type TOY and commits nothing. A mutation reserves the prefix
// <dataset>/_indices/toy-<invocation>/, writes one object under it (file:// stores only) and one
// file into its private TMPDIR, and answers NOT_SUPPORTED (7) — or, with index.params claim=commit,
// lies: COMMITTED at pinned+1. Its settle answers NOT_COMMITTED (nothing of it is ever in a slot).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

type toy struct{}

func (toy) Mutate(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest) *workerproto.Result {
	prefix := strings.Trim(req.Dataset.Path, "/") + "/_indices/toy-" + req.InvocationID + "/"
	if err := c.Reserve(ctx, nil, []string{prefix}); err != nil {
		return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIO, Message: err.Error()}
	}
	if root, ok := strings.CutPrefix(req.Dataset.Store.URL, "file://"); ok {
		root, _ = url.PathUnescape(root)
		dir := filepath.Join(root, prefix)
		if err := os.MkdirAll(dir, 0o755); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "part-0.toy"), []byte("toy"), 0o644)
		}
	}
	_ = os.WriteFile(filepath.Join(os.Getenv("TMPDIR"), "shuffle.tmp"), []byte("left behind"), 0o644)
	c.Progress("build", 1, 1)
	if req.Index.Params["claim"] == "commit" {
		return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted,
			CommittedVersion: req.PinnedVersion + 1, ObservedLatest: req.PinnedVersion + 1}
	}
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotSupported, Message: "the toy engine builds nothing"}
}

func (toy) Settle(_ context.Context, _ *enginesdk.Conn, req *workerproto.SettleRequest) *workerproto.Settled {
	return &workerproto.Settled{Outcome: rpc.OutcomeNotCommitted, Version: req.PinnedVersion + 1,
		Reason: fmt.Sprintf("the toy engine never commits (domain_reaped=%v)", req.DomainReaped)}
}

func main() {
	settle := flag.String("settle", workerproto.SettleFence, "the settle guarantee to declare")
	flag.Parse()
	c, err := enginesdk.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testengine:", err)
		os.Exit(2)
	}
	os.Exit(enginesdk.Serve(context.Background(), c,
		workerproto.Engine{Name: "toy", IndexTypes: []string{"TOY"}, Settle: *settle}, toy{}))
}
