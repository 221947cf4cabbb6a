package sidecar_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// TestConditionalWritesRefusedOnS3: the sidecar probes If-None-Match: * on an S3 store before
// the first commit or fence there. Straight to MinIO the probe passes and a mutation commits;
// through a loopback proxy that strips If-None-Match before forwarding to the same MinIO (a
// store that ignores the header, lance#6595) index.mutate is refused at receive with -32015 —
// nothing launched, nothing committed, on every later call too, without probing again — and
// index.resolve answers UNKNOWN with the reason instead of writing a fence that would prove
// nothing. An unreachable store is -32013 (probed again next time).
func TestConditionalWritesRefusedOnS3(t *testing.T) {
	srv := testminio.Shared(t)
	ctx := context.Background()
	bucket, direct := s3Dataset(t, srv, "condwrite-", 2000)
	proxy, stripped := stripIfNoneMatch(t, srv.Endpoint)

	tmp := t.TempDir()
	// The proxy is reached without keys: a call without credentials on it must be allowed
	// (the sidecar has no keys of its own, so it reaches it anonymously).
	e := newSidecarWithEnv(t, []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp, "HOME=" + tmp}, "--state-dir", filepath.Join(tmp, "state"),
		"--allow-store", "s3://"+bucket+"@"+proxy)
	keys := &rpc.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
	mutate := func(store rpc.StoreSpec, creds *rpc.Credentials, pinned int64, name string) (rpc.MutateParams, rpc.MutateResult, error) {
		p := rpc.MutateParams{InvocationID: randID("inv-"), DeadlineUnixMs: time.Now().Add(30 * time.Second).UnixMilli(),
			Dataset: rpc.DatasetRef{Store: store, Path: "tbl"}, PinnedVersion: pinned, Op: rpc.OpCreate, Credentials: creds,
			Index: rpc.IndexSpec{Name: name, Columns: []string{"category"}, Type: rpc.IndexBitmap}}
		res, err := e.c.Mutate(ctx, p)
		return p, res, err
	}

	// Straight to MinIO: the probe passes, the mutation commits.
	p, res, err := mutate(rpc.StoreSpec{URL: "s3://" + bucket, Endpoint: srv.Endpoint}, keys, 1, "ok")
	if err != nil || res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeOK || res.CommittedVersion != 2 {
		t.Fatalf("mutation on MinIO: %+v, %v; want a commit at 2", res, err)
	}
	committed := p.InvocationID

	// The same bucket through the stripping proxy, without keys (the proxy would break a signature).
	ignoring := rpc.StoreSpec{URL: "s3://" + bucket, Endpoint: proxy}
	for i := range 2 {
		p, res, err := mutate(ignoring, nil, 2, fmt.Sprintf("refused%d", i))
		var we *rpc.Error
		if !errors.Is(err, rpc.ErrConditionalWritesIgnored) || !errors.As(err, &we) || we.Code != -32015 {
			t.Fatalf("mutation %d through a store that ignores If-None-Match: %+v, %v; want error -32015", i+1, res, err)
		}
		t.Logf("index.mutate → %v", err)
		if dom := e.domainOf(p.InvocationID); dom != "" {
			t.Fatalf("a worker (%s) was launched for a refused mutation", dom)
		}
	}
	if v, err := dataset.LatestVersion(ctx, direct, "tbl"); err != nil || v != 2 {
		t.Fatalf("latest version %d, %v after the refusals; want 2", v, err)
	}
	if stripped.Load() == 0 {
		t.Fatal("no put-if-absent went through the proxy: the refusal proves nothing")
	}

	r, err := e.c.Resolve(ctx, rpc.ResolveParams{InvocationID: committed, Dataset: rpc.DatasetRef{Store: ignoring, Path: "tbl"}, PinnedVersion: 2})
	if err != nil || r.Outcome != rpc.OutcomeUnknown || r.Fenced || !strings.Contains(r.Reason, "ignores conditional writes") {
		t.Fatalf("resolve through the ignoring store: %+v, %v; want UNKNOWN with the reason", r, err)
	}
	t.Logf("index.resolve → %+v", r)
	if v, _ := dataset.LatestVersion(ctx, direct, "tbl"); v != 2 {
		t.Fatalf("resolve wrote slot %d on a store that ignores conditional writes", v)
	}
	if left, _ := storage.ListAll(ctx, direct, storage.ProbeKeyPrefix); len(left) > 0 {
		t.Fatalf("probe objects left: %v", left)
	}

	_, _, err = mutate(rpc.StoreSpec{URL: "s3://" + bucket, Endpoint: "127.0.0.1:1"}, keys, 2, "unreachable")
	if !errors.Is(err, rpc.ErrStorageUnavailable) {
		t.Fatalf("mutation on an unreachable store: %v; want -32013", err)
	}
	text, err := e.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`steward_condwrite_probes_total{verdict="honoured"} 1`, `steward_condwrite_probes_total{verdict="ignored"} 1`,
		`steward_condwrite_probes_total{verdict="failed"} 1`, "steward_condwrite_stores_refused 1"} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %q (one probe per store, the refusal remembered)", want)
		}
	}
}

// stripIfNoneMatch starts a reverse proxy on 127.0.0.1 to endpoint that drops If-None-Match from
// every request: to its clients, an S3 store that ignores the precondition. It counts the
// requests it stripped.
func stripIfNoneMatch(t *testing.T, endpoint string) (string, *atomic.Int64) {
	t.Helper()
	target := &url.URL{Scheme: "http", Host: endpoint}
	var stripped atomic.Int64
	ts := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		if r.Out.Header.Get("If-None-Match") != "" {
			r.Out.Header.Del("If-None-Match")
			stripped.Add(1)
		}
	}})
	t.Cleanup(ts.Close)
	return strings.TrimPrefix(ts.URL, "http://"), &stripped
}

// publicBucket creates bucket with a policy that lets anonymous clients list, read, write and
// delete: SigV4 signs If-None-Match, so only unsigned requests survive the stripping proxy.
// s3Dataset makes a public bucket named after prefix on srv, holding dataset "tbl" of rows rows
// at version 1, and returns the bucket's name and the bucket as a store.
func s3Dataset(t *testing.T, srv *testminio.Server, prefix string, rows int64) (string, storage.Store) {
	t.Helper()
	bucket := strings.ToLower(randID(prefix))
	publicBucket(t, srv, bucket)
	direct, err := storage.OpenStore(context.Background(), storage.StoreConfig{Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: bucket,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dataset.Create(context.Background(), direct, "tbl", dataset.NewGenerator(rows, 1), dataset.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return bucket, direct
}

func publicBucket(t *testing.T, srv *testminio.Server, bucket string) {
	t.Helper()
	ctx := context.Background()
	c, err := minio.New(srv.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[
{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetBucketLocation","s3:ListBucket"],"Resource":["arn:aws:s3:::%[1]s"]},
{"Effect":"Allow","Principal":{"AWS":["*"]},"Action":["s3:GetObject","s3:PutObject","s3:DeleteObject"],"Resource":["arn:aws:s3:::%[1]s/*"]}]}`, bucket)
	if err := c.SetBucketPolicy(ctx, bucket, policy); err != nil {
		t.Fatal(err)
	}
}
