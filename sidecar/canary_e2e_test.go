package sidecar_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
)

// TestCredentialCanaryNeverLeaks passes a live secret as a per-call credential, through a
// successful mutation, a failing one and a resolve, then looks for it everywhere steward writes:
// its logs (stderr, re-emitted through the host logger), metrics, every answer, and every file
// under the sidecar's temp and state directories.
func TestCredentialCanaryNeverLeaks(t *testing.T) {
	srv := testminio.Shared(t)
	canary := srv.SecretKey
	tmp := t.TempDir()
	e := newSidecarWithEnv(t, []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp, "HOME=" + tmp}, "--state-dir", filepath.Join(tmp, "state"))
	ctx := context.Background()
	bucket := strings.ToLower(randID("canary-"))
	st, err := storage.OpenStore(ctx, storage.StoreConfig{Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dataset.Create(ctx, st, "tbl", dataset.NewGenerator(5000, 1), dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ref := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://" + bucket, Endpoint: srv.Endpoint}, Path: "tbl"}
	good := &rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: canary}
	bad := &rpc.Credentials{AccessKey: "nobody", SecretKey: canary}

	var answers []string
	mutate := func(creds *rpc.Credentials, name string) rpc.MutateResult {
		p := rpc.MutateParams{InvocationID: randID("inv-"), DeadlineUnixMs: time.Now().Add(30 * time.Second).UnixMilli(),
			Dataset: ref, PinnedVersion: 1, Op: rpc.OpCreate, Credentials: creds,
			Index: rpc.IndexSpec{Name: name, Columns: []string{"category"}, Type: rpc.IndexBitmap}}
		res, err := e.c.Mutate(ctx, p)
		if err != nil {
			answers = append(answers, err.Error())
			t.Fatalf("mutate: %v", err)
		}
		answers = append(answers, res.Message, res.CompletionReason)
		return res
	}
	if res := mutate(good, "ok"); res.Code != rpc.NativeOK || res.CommittedVersion != 2 {
		t.Fatalf("mutation with good credentials: %+v", res)
	}
	if res := mutate(bad, "denied"); res.Phase != rpc.PhasePreInvocationRejected {
		t.Fatalf("mutation with a wrong access key: %+v", res)
	}
	r, err := e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: "inv-none", Dataset: ref, PinnedVersion: 2, Credentials: bad})
	if err != nil {
		answers = append(answers, err.Error())
	} else {
		answers = append(answers, r.Reason)
	}
	text, err := e.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.c.Close()

	places := map[string]string{"metrics": text, "sidecar log": e.logs.String(), "answers": strings.Join(answers, "\n")}
	for place, content := range places {
		if strings.Contains(content, canary) {
			t.Errorf("the canary secret appears in %s", place)
		}
	}
	if len(e.logs.String()) == 0 {
		t.Fatal("no sidecar log captured: the log check would prove nothing")
	}
	files := 0
	_ = filepath.WalkDir(tmp, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		files++
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), canary) {
			t.Errorf("the canary secret appears in file %s", path)
		}
		return nil
	})
	t.Logf("checked %d files, %d bytes of logs, %d bytes of metrics", files, len(e.logs.String()), len(text))
}
