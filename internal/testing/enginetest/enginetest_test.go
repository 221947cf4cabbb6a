package enginetest_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// helperEnv selects what TestHelperEngine, re-run as an engine by the harness, does.
const helperEnv = "ENGINETEST_HELPER"

// helperEngine is this test binary re-run as an engine (go-plugin's helperProcess).
func helperEngine(mode string) enginetest.Engine {
	return enginetest.Engine{Argv: []string{os.Args[0], "-test.run=^TestHelperEngine$"}, Env: []string{helperEnv + "=" + mode}}
}

// TestHelperEngine is not a test: it is an engine in Go, for the harness's own tests. It speaks
// protocol v1 on fd 3/4 and reaches its dataset with minio-go on what the request names, as an
// engine written from docs/ENGINE.md would.
func TestHelperEngine(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		return // run by the harness's tests only
	}
	in, out := os.NewFile(3, "request"), os.NewFile(4, "answer")
	send := func(f map[string]any) {
		b, _ := json.Marshal(f)
		_ = binary.Write(out, binary.BigEndian, uint32(len(b)))
		_, _ = out.Write(b)
	}
	hello := map[string]any{"t": "hello", "pid": os.Getpid(), "engine": map[string]any{"name": "helper", "protocol": 1, "index_types": []string{"BTREE"}}}
	if mode == "bad-first-frame" {
		send(map[string]any{"t": "progress", "stage": "x"})
		os.Exit(0)
	}
	send(hello)
	var hdr [4]byte
	if _, err := io.ReadFull(in, hdr[:]); err != nil {
		os.Exit(2)
	}
	body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(in, body); err != nil {
		os.Exit(2)
	}
	var f struct {
		Request struct {
			Pinned  int64 `json:"pinned_version"`
			Dataset struct {
				Path  string `json:"path"`
				Store struct {
					URL, Endpoint, Region string
				} `json:"store"`
			} `json:"dataset"`
			Credentials struct {
				AccessKey string `json:"access_key"`
				SecretKey string `json:"secret_key"`
			} `json:"credentials"`
		} `json:"request"`
	}
	if err := json.Unmarshal(body, &f); err != nil {
		os.Exit(2)
	}
	r := f.Request
	mc, err := minio.New(r.Dataset.Store.Endpoint, &minio.Options{Region: r.Dataset.Store.Region,
		Creds: credentials.NewStaticV4(r.Credentials.AccessKey, r.Credentials.SecretKey, "")})
	if err != nil {
		os.Exit(2)
	}
	bucket := strings.TrimPrefix(r.Dataset.Store.URL, "s3://")
	put := func(key, body string) string {
		_, err := mc.PutObject(context.Background(), bucket, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		return minio.ToErrorResponse(err).Code
	}
	result := map[string]any{"phase": "NATIVE_RETURN", "code": 0}
	switch mode {
	case "commit": // a data object, then the manifest of pinned+1
		code := put(r.Dataset.Path+"/data/x.bin", "data")
		if code == "" {
			code = put(fmt.Sprintf("%s/_versions/%d.manifest", r.Dataset.Path, r.Pinned+1), "manifest")
		}
		if code != "" {
			result["code"], result["message"] = 6, code
		} else {
			result["committed_version"], result["completion_reason"] = r.Pinned+1, "COMMITTED"
		}
	case "escape": // the sidecar's claims, another dataset, a version past the slot
		result["code"], result["message"] = 6, strings.Join([]string{
			put(slot.ClaimKey(r.Dataset.Path, r.Pinned+1, "other"), `{"invocation":"other","kind":"fence"}`),
			put("elsewhere/data/x.bin", "data"),
			put(fmt.Sprintf("%s/_versions/%d.manifest", r.Dataset.Path, r.Pinned+2), "manifest"),
		}, ",")
	case "bad-seq":
		send(map[string]any{"t": "reserve", "seq": 2, "keys": []string{"k"}})
	case "bad-uuid":
		result["index_uuid"] = "../x"
	}
	send(map[string]any{"t": "result", "result": result})
	if mode == "after-answer" {
		send(map[string]any{"t": "progress", "stage": "late"})
	}
	os.Exit(0)
}

// helperStore is a local store with a dataset folder the helper engine writes to.
func helperStore(t *testing.T) (storage.Store, map[string]any) {
	dir := t.TempDir()
	st, err := storage.NewLocalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The pinned version's manifest, in the naming the helper engine commits in (Lance's V1): the
	// gateway takes a commit only in the dataset's own naming.
	if err := st.Put(context.Background(), "ds/_versions/3.manifest", strings.NewReader("v3"), 2); err != nil {
		t.Fatal(err)
	}
	req := map[string]any{"invocation_id": "inv-h", "pinned_version": 3, "op": "CREATE",
		"dataset": map[string]any{"path": "ds", "store": map[string]any{"url": "file://" + dir}}}
	return st, req
}

// TestHarnessServesAGateway: the engine's request names the harness's gateway (s3://steward on
// loopback, a per-session key, never the store's URL), an engine writing with a plain S3 client
// through it commits pinned+1, the gateway records the object and the landed commit, and
// slot.Decide says COMMITTED.
func TestHarnessServesAGateway(t *testing.T) {
	st, req := helperStore(t)
	sess, err := enginetest.Run(context.Background(), helperEngine("commit"), req, enginetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := sess.Result; r == nil || r.Code != 0 || r.CommittedVersion != 4 {
		t.Fatalf("result %+v\n%s", r, sess.GatewayLog.String())
	}
	ds, _ := sess.Request["dataset"].(map[string]any)
	store, _ := ds["store"].(map[string]any)
	creds, _ := sess.Request["credentials"].(map[string]any)
	if store["url"] != "s3://"+enginetest.GatewayBucket || !strings.HasPrefix(store["endpoint"].(string), "127.0.0.1:") || creds["access_key"] == "" {
		t.Errorf("the engine was handed %v with %v", ds, creds)
	}
	rec := sess.Gateway
	if rec.Slot != gateway.SlotLanded || !slices.Equal(rec.Written, []string{"ds/data/x.bin"}) || !slices.Equal(sess.Custody(), rec.Written) {
		t.Errorf("record %+v, custody %v", rec, sess.Custody())
	}
	if v, err := sess.Decide(context.Background()); err != nil || v.Outcome != slot.Committed {
		t.Errorf("decide: %+v %v", v, err)
	}
	if _, err := st.Stat(context.Background(), "ds/_versions/4.manifest"); err != nil {
		t.Errorf("the manifest is not in the store: %v", err)
	}
}

// TestHarnessGatewayRefuses: through the harness's gateway an engine can write neither the
// sidecar's claims, nor another dataset, nor a version other than pinned+1; nothing lands and
// storage decides NOT_COMMITTED (fenced). OnWrite refusing a key refuses its write too.
func TestHarnessGatewayRefuses(t *testing.T) {
	st, req := helperStore(t)
	sess, err := enginetest.Run(context.Background(), helperEngine("escape"), req, enginetest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r := sess.Result; r == nil || r.Message != "AccessDenied,AccessDenied,PreconditionFailed" {
		t.Errorf("answers %+v, want AccessDenied twice and PreconditionFailed", r)
	}
	if rec := sess.Gateway; rec.Slot != gateway.SlotNone || len(rec.Written) != 0 || rec.Refusals != 3 {
		t.Errorf("record %+v", rec)
	}
	if all, err := storage.ListAll(context.Background(), st, ""); err != nil || len(all) != 1 || all[0].Key != "ds/_versions/3.manifest" {
		t.Errorf("objects %v %v, want the pinned manifest alone", all, err)
	}
	if v, err := sess.Decide(context.Background()); err != nil || v.Outcome != slot.NotCommitted || !v.Fenced {
		t.Errorf("decide: %+v %v", v, err)
	}

	_, req = helperStore(t)
	refused := errors.New("not this one")
	sess, err = enginetest.Run(context.Background(), helperEngine("commit"), req, enginetest.Options{OnWrite: func(string) error { return refused }})
	if err != nil {
		t.Fatal(err)
	}
	if r := sess.Result; r == nil || r.Code != 6 || r.Message != "AccessDenied" || len(sess.Gateway.Written) != 0 || len(sess.Custody()) != 1 {
		t.Errorf("with OnWrite refusing: %+v, written %v, custody %v", r, sess.Gateway.Written, sess.Custody())
	}
}

// TestHarnessFrameRules: the harness refuses, as the sidecar does, a first frame that is not
// hello, a reserve out of sequence, a result with an index_uuid outside ENGINE.md §3's alphabet,
// and a frame after the answer.
func TestHarnessFrameRules(t *testing.T) {
	for _, mode := range []string{"bad-first-frame", "bad-seq", "bad-uuid", "after-answer"} {
		t.Run(mode, func(t *testing.T) {
			_, req := helperStore(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := enginetest.Run(ctx, helperEngine(mode), req, enginetest.Options{}); !errors.Is(err, enginetest.ErrProtocol) {
				t.Errorf("%s: %v, want a protocol violation", mode, err)
			}
		})
	}
}
