// Command testengine is a toy engine of engine protocol v1, written against the Go SDK
// (sidecar/enginesdk) as an engine outside steward would be, for the sidecar's end-to-end tests:
//
//	testengine --settle fence|claim-fence|none
//
// It builds index type TOY and commits nothing. A mutation reserves the prefix
// <dataset>/_indices/toy-<invocation>/, writes one object under it (file:// stores only) and one
// file into its private TMPDIR, and answers NOT_SUPPORTED (7) — or, with index.params claim=commit,
// lies: COMMITTED at pinned+1. Its settle answers NOT_COMMITTED (nothing of it is ever in a slot).
//
// With index.params claim=slot it also claims the slot pinned+1 for its commit as a claim-fence
// engine does (file:// stores only), holds its answer for index.params hold (a Go duration), and
// records when it answered in <dataset>/toy-<invocation>.answered; the settle of such an
// invocation records when its process started and when its request came in
// <dataset>/toy-<invocation>.settle ("<started> <requested>", Unix nanoseconds).
//
// For the custody and credential tests, index.params select other behaviours, each answering
// NOT_SUPPORTED with a report in its message: report=credentials (a fingerprint of the keys its
// request frame carried, or "none"); reserve_keys=a,b/,… (each name, relative to the dataset,
// reserved in its own frame, written when granted on a file:// store); reserve_many=N (N fresh
// keys in frames of 1000, until one is refused).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

type toy struct{}

func (toy) Mutate(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest) *workerproto.Result {
	switch {
	case req.Index.Params["report"] == "credentials":
		return notSupported("credentials=" + fingerprint(req.Credentials))
	case req.Index.Params["reserve_keys"] != "":
		return notSupported(reserveEach(ctx, c, req, strings.Split(req.Index.Params["reserve_keys"], ",")))
	case req.Index.Params["reserve_many"] != "":
		return notSupported(reserveMany(ctx, c, req, req.Index.Params["reserve_many"]))
	}
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
	if req.Index.Params["claim"] == "slot" {
		claimSlot(req)
		hold, _ := time.ParseDuration(req.Index.Params["hold"])
		time.Sleep(hold)
		writeFile(req.Dataset, toyRecord(req.Dataset.Path, req.InvocationID, "answered"), strconv.FormatInt(time.Now().UnixNano(), 10))
	}
	if c := req.Index.Params["claim"]; c == "commit" || c == "slot" {
		return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted,
			CommittedVersion: req.PinnedVersion + 1, ObservedLatest: req.PinnedVersion + 1}
	}
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotSupported, Message: "the toy engine builds nothing"}
}

func notSupported(msg string) *workerproto.Result {
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotSupported, Message: msg}
}

// fingerprint names the credentials the engine was given without revealing them: "none", or the
// first 8 bytes of the access key's SHA-256 in hex.
func fingerprint(c *rpc.Credentials) string {
	if c == nil {
		return "none"
	}
	sum := sha256.Sum256([]byte(c.AccessKey))
	return hex.EncodeToString(sum[:8])
}

// reserveEach reserves each name (relative to the dataset; a trailing "/" makes it a prefix) in
// its own frame, writes a granted key on a file:// store, and reports name=granted or
// name=refused:<refusal> for each, joined by ";".
func reserveEach(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest, names []string) string {
	base := strings.Trim(req.Dataset.Path, "/") + "/"
	var out []string
	for _, n := range names {
		name := base + n
		var err error
		if strings.HasSuffix(name, "/") {
			err = c.Reserve(ctx, nil, []string{name})
		} else {
			err = c.Reserve(ctx, []string{name}, nil)
		}
		var refused *enginesdk.RefusedError
		switch {
		case errors.As(err, &refused):
			out = append(out, n+"=refused:"+refused.Refusal)
		case err != nil:
			out = append(out, n+"=error")
		default:
			out = append(out, n+"=granted")
			writeFile(req.Dataset, name, "toy")
		}
	}
	return strings.Join(out, ";")
}

// reserveMany reserves n fresh keys under data/, in frames of at most MaxReserveNames, until one
// is refused, and reports granted=<count> refusal=<refusal or none>.
func reserveMany(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest, n string) string {
	total, err := strconv.Atoi(n)
	if err != nil {
		return "bad reserve_many"
	}
	base := strings.Trim(req.Dataset.Path, "/") + "/data/many-" + req.InvocationID + "-"
	granted := 0
	for granted < total {
		var keys []string
		for i := granted; i < total && len(keys) < workerproto.MaxReserveNames; i++ {
			keys = append(keys, base+strconv.Itoa(i))
		}
		var refused *enginesdk.RefusedError
		if err := c.Reserve(ctx, keys, nil); errors.As(err, &refused) {
			return fmt.Sprintf("granted=%d refusal=%s", granted, refused.Refusal)
		} else if err != nil {
			return fmt.Sprintf("granted=%d error", granted)
		}
		granted += len(keys)
	}
	return fmt.Sprintf("granted=%d refusal=none", granted)
}

// writeFile writes the object name, holding content, on a file:// store (the engine has no S3
// client).
func writeFile(ds rpc.DatasetRef, name, content string) {
	p, ok := localPath(ds, name)
	if !ok || strings.HasSuffix(name, "/") {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
		_ = os.WriteFile(p, []byte(content), 0o644)
	}
}

// localPath is where object name of a file:// store lies.
func localPath(ds rpc.DatasetRef, name string) (string, bool) {
	root, ok := strings.CutPrefix(ds.Store.URL, "file://")
	if !ok {
		return "", false
	}
	root, _ = url.PathUnescape(root)
	return filepath.Join(root, name), true
}

// claimSlot writes the commit claim of req's invocation at pinned+1 (docs/ENGINE.md §5.3).
func claimSlot(req *workerproto.MutateRequest) {
	name := fmt.Sprintf("%s/_steward/slots/%020d.json", strings.Trim(req.Dataset.Path, "/"), req.PinnedVersion+1)
	writeFile(req.Dataset, name, fmt.Sprintf(`{"invocation":%q,"kind":"commit"}`, req.InvocationID))
}

// toyRecord names a record of invocation inv in its dataset.
func toyRecord(dataset, inv, what string) string {
	return strings.Trim(dataset, "/") + "/toy-" + inv + "." + what
}

// started is when this process started (near enough: when its package was initialized).
var started = time.Now()

func (toy) Settle(_ context.Context, _ *enginesdk.Conn, req *workerproto.SettleRequest) *workerproto.Settled {
	if p, ok := localPath(req.Dataset, toyRecord(req.Dataset.Path, req.InvocationID, "answered")); ok {
		if _, err := os.Stat(p); err == nil {
			writeFile(req.Dataset, toyRecord(req.Dataset.Path, req.InvocationID, "settle"),
				fmt.Sprintf("%d %d", started.UnixNano(), time.Now().UnixNano()))
		}
	}
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
