package sidecar_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// toyMutate runs one mutation of the toy engine with index params and returns its answer, which
// must be the toy's NOT_SUPPORTED with a report in its message.
func toyMutate(t *testing.T, c interface {
	Mutate(context.Context, rpc.MutateParams) (rpc.MutateResult, error)
}, ref rpc.DatasetRef, creds *rpc.Credentials, params map[string]string) (rpc.MutateResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return c.Mutate(ctx, rpc.MutateParams{InvocationID: randID("inv-"), JobID: randID("job-"),
		DeadlineUnixMs: time.Now().Add(45 * time.Second).UnixMilli(), Dataset: ref, PinnedVersion: 1, Op: rpc.OpCreate,
		Engine: "toy", Credentials: creds, Index: rpc.IndexSpec{Name: "ix", Columns: []string{"name"}, Type: "TOY", Params: params}})
}

func wantReport(t *testing.T, res rpc.MutateResult, err error, want string) {
	t.Helper()
	if err != nil || res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeNotSupported || res.Message != want {
		t.Fatalf("answer %+v, %v; want NOT_SUPPORTED with %q", res, err, want)
	}
}

// listing is every key under prefix with its size.
func listing(t *testing.T, st storage.Store, prefix string) map[string]int64 {
	t.Helper()
	all, err := storage.ListAll(context.Background(), st, prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, o := range all {
		out[o.Key] = o.Size
	}
	return out
}

// sameListing fails t unless the store holds exactly what it held before under prefix.
func sameListing(t *testing.T, st storage.Store, prefix string, before map[string]int64, when string) {
	t.Helper()
	now := listing(t, st, prefix)
	for k, size := range now {
		if b, ok := before[k]; !ok || b != size {
			t.Errorf("%s: %s (%d bytes) is new or changed in the store", when, k, size)
		}
	}
	for k := range before {
		if _, ok := now[k]; !ok {
			t.Errorf("%s: %s, which the engine did not write, is gone", when, k)
		}
	}
}

// TestWorkerWritesOnlyNewNames drives a real sidecar with a real engine of the public protocol
// (internal/testing/testengine) on a local store. The engine reaches the store only through its
// invocation's gateway, as an S3 client, and custody is taken by observation, without a reserve
// frame: it may create new keys in its own dataset's data/, _indices/ and _transactions/ folders
// and nothing else. An existing key (another writer's data file, or its own written a moment
// before), a committed version's manifest or a later one than its slot, the version hint, any
// other _versions/ file, a forged claim under _steward/, _deletions/, the dataset's root,
// another dataset by key, by "..", and by percent-encoded dots and separators are each refused
// with an S3 error and never reach the store; it may delete what it wrote and nothing else.
// When the invocation ends NOT_COMMITTED, everything it wrote is deleted (ledger Deleted, and the
// store lists exactly what it did before). Past --ledger-quota objects, and past --worker-disk
// bytes, its next PUT is refused.
func TestWorkerWritesOnlyNewNames(t *testing.T) {
	bin := buildTestEngine(t)
	e := newSidecarWithEnv(t, os.Environ(), "--state-dir", t.TempDir(), "--engine", "toy="+bin+" --settle fence",
		"--ledger-quota", "8", "--ledger-capacity", "64", "--worker-disk", "4096")
	if q := e.c.Info().Limits.LedgerQuota; q != 8 {
		t.Fatalf("hello limits.ledger_quota %d, want 8", q)
	}
	if s := e.c.Info().Storage; s == nil || s.Mode != "gateway" || s.Reach != "domain" || s.Endpoint != "127.0.0.1:7480" || s.WorkerDiskBytes != 4096 {
		t.Fatalf("hello storage %+v: want the gateway in each domain, 4096 bytes per invocation", s)
	}
	e.makeDataset("ds", 100)
	e.makeDataset("other", 100)
	ctx := context.Background()
	first := func(prefix string) string {
		for info, err := range e.store.List(ctx, prefix) {
			if err != nil {
				t.Fatal(err)
			}
			return info.Key
		}
		t.Fatalf("nothing under %s", prefix)
		return ""
	}
	theirs, otherData := strings.TrimPrefix(first("ds/data/"), "ds/"), first("other/data/")
	before := listing(t, e.store, "")
	ref := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: "ds"}
	puts := []struct{ name, want string }{
		{"data/new-1.bin", "ok"},
		{theirs, "AccessDenied"},           // another writer's object: custody refuses an existing key
		{"data/new-1.bin", "AccessDenied"}, // its own, written a moment ago: no overwrite either
		{"_indices/toy-a/part-0", "ok"},
		{"_transactions/1-u.txn", "ok"},
		{"_versions/00000000000000000001.manifest", "PreconditionFailed"}, // committed, not its slot
		{"_versions/00000000000000000003.manifest", "PreconditionFailed"}, // past its slot
		{"_versions/latest_version_hint.json", "AccessDenied"},            // no commit of its own
		{"_versions/notes.txt", "AccessDenied"},
		{"_steward/claims/00000000000000000002/forged.json", "AccessDenied"},
		{"_deletions/1.arrow", "AccessDenied"},
		{"top.bin", "AccessDenied"},
		{"/other/data/x", "AccessDenied"},
		{"../other/data/x", "AccessDenied"},
		{"%2e%2e/other/data/y", "AccessDenied"},
		{"data%2f..%2f..%2fother%2fdata%2fz", "AccessDenied"},
	}
	deletes := []struct{ name, want string }{
		{theirs, "AccessDenied"}, {"/" + otherData, "AccessDenied"}, {"_transactions/1-u.txn", "ok"},
	}
	var names, want []string
	for _, p := range puts {
		names, want = append(names, p.name), append(want, "put "+p.name+"="+p.want)
	}
	var dels []string
	for _, d := range deletes {
		dels, want = append(dels, d.name), append(want, "delete "+d.name+"="+d.want)
	}
	res, err := toyMutate(t, e.c, ref, nil, map[string]string{"put": strings.Join(names, ","), "delete": strings.Join(dels, ",")})
	wantReport(t, res, err, strings.Join(want, ";"))
	// What it wrote was in custody and is deleted with the abandon (the one it deleted itself
	// counts as deleted too); what it was refused never reached the store.
	if f := waitTickets(t, e.c, 0); f.Deleted != 3 {
		t.Errorf("ledger after the abandon: %+v, want the 3 keys the engine wrote deleted", f)
	}
	sameListing(t, e.store, "", before, "after the abandon")

	// The quotas: 8 objects fit in the ledger quota and the 9th PUT is refused; 4 objects of
	// 1000 bytes fit in --worker-disk 4096 and the 5th is refused. All of them are abandoned.
	res, err = toyMutate(t, e.c, ref, nil, map[string]string{"put_many": "8"})
	wantReport(t, res, err, "written=8 refusal=none")
	res, err = toyMutate(t, e.c, ref, nil, map[string]string{"put_many": "9"})
	wantReport(t, res, err, "written=8 refusal=AccessDenied")
	res, err = toyMutate(t, e.c, ref, nil, map[string]string{"put_many": "10", "size": "1000"})
	wantReport(t, res, err, "written=4 refusal=QuotaExceeded")
	if f := waitTickets(t, e.c, 0); f.Deleted != 3+8+8+4 {
		t.Errorf("ledger after the quota runs: %+v, want %d keys deleted", f, 3+8+8+4)
	}
	sameListing(t, e.store, "", before, "after the quota runs")
	for _, path := range []string{"ds", "other"} {
		if _, err := dataset.Open(ctx, e.store, path, 1); err != nil {
			t.Errorf("dataset %s after the hostile writes: %v", path, err)
		}
	}
	for name, want := range map[string]float64{"steward_ledger_invocation_quota": 8, "steward_ledger_quota_refusals_total": 1,
		"steward_ledger_existing_name_refusals_total": 2} {
		if got := metricOf(t, e.c, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	refused := 2 // the two quota runs
	for _, w := range append(puts, deletes...) {
		if w.want != "ok" {
			refused++
		}
	}
	if n := strings.Count(e.logs.String(), `"gateway refused a request"`); n != refused {
		t.Errorf("%d gateway refusals logged, want %d: one for each refused request", n, refused)
	}
}

// fields splits a toy report "k=v k=v …" into its fields.
func fields(msg string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(msg) {
		k, v, _ := strings.Cut(f, "=")
		out[k] = v
	}
	return out
}

// openTestStore opens the test's own view of a store.
func openTestStore(t *testing.T, cfg storage.StoreConfig) storage.Store {
	t.Helper()
	st, err := storage.OpenStore(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestWorkerGetsOnlyAGatewayKey: a sidecar with its own keys for one MinIO prefix. Whatever the
// call brings — no credentials on that store (the sidecar's keys serve it), keys of its own for
// a store of its own (another MinIO), or a file:// store — the engine's request names its
// gateway (s3://steward at 127.0.0.1:7480) and carries a key of its invocation's own: never the
// call's keys nor the sidecar's, a new one each invocation, one the gateway accepts (another key
// id is refused there) and neither MinIO knows (the toy writes its key id into an object its
// commit keeps, for the test to try). A call without credentials on another prefix of the same
// bucket is refused (-32016) before any worker starts. Through the gateway an existing object of the store is
// refused to the engine (PUT and DELETE), and survives the invocation's abandon, while what it
// wrote is deleted.
func TestWorkerGetsOnlyAGatewayKey(t *testing.T) {
	bin := buildTestEngine(t)
	e := newLedgerEnv(t, "--engine", "toy="+bin+" --settle fence")
	if c := e.c.Info().Credentials; c == nil || c.Source != "file" || len(c.AllowStores) != 1 {
		t.Fatalf("hello credentials %+v: want source file and the one allowed store", c)
	}
	fp := func(ak string) string {
		sum := sha256.Sum256([]byte(ak))
		return hex.EncodeToString(sum[:8])
	}
	direct := func(endpoint, ak string) string {
		cl, err := minio.New(endpoint, &minio.Options{Creds: credentials.NewStaticV4(ak, "any-secret", ""), Region: "us-east-1"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.BucketExists(context.Background(), "ledger-e2e")
		return minio.ToErrorResponse(err).Code
	}
	ref := rpc.DatasetRef{Store: e.spec, Path: "ds"}
	// A call with keys of its own, for a store of its own (another MinIO, other root keys).
	own := testminio.Dedicated(t)
	callers := &rpc.Credentials{AccessKey: own.AccessKey, SecretKey: own.SecretKey}
	ownStore := openTestStore(t, storage.StoreConfig{Kind: storage.KindS3, Endpoint: own.Endpoint, Bucket: "callers-own",
		AccessKey: own.AccessKey, SecretKey: own.SecretKey})
	dir := t.TempDir()
	local := openTestStore(t, storage.StoreConfig{Kind: storage.KindLocal, Root: dir})
	var keys []string
	for _, c := range []struct {
		name  string
		store rpc.StoreSpec
		creds *rpc.Credentials
		st    storage.Store // the test's view of that store
	}{
		{"the sidecar's keys", e.spec, nil, e.store},
		{"the sidecar's keys again", e.spec, nil, e.store},
		{"the call's own keys", rpc.StoreSpec{URL: "s3://callers-own", Endpoint: own.Endpoint}, callers, ownStore},
		{"a file store", rpc.StoreSpec{URL: "file://" + dir}, nil, local},
	} {
		// The toy commits (a dataset of its own each time), so that the object holding its key
		// id is kept for the test to read.
		path := randID("keys-")
		// Its pinned version's manifest, in the naming the toy commits in: the gateway takes a
		// commit only in the dataset's own naming.
		if err := c.st.Put(context.Background(), path+"/_versions/00000000000000000001.manifest", strings.NewReader("v1"), 2); err != nil {
			t.Fatal(err)
		}
		res, err := toyMutate(t, e.c, rpc.DatasetRef{Store: c.store, Path: path}, c.creds,
			map[string]string{"report": "credentials", "commit": "yes"})
		if err != nil || res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeOK || res.CommittedVersion != 2 {
			t.Fatalf("%s: %+v %v; want the toy's commit at version 2", c.name, res, err)
		}
		r := fields(res.Message)
		b, err := storage.ReadAll(context.Background(), c.st, path+"/data/toy-key-"+res.InvocationID, 1024)
		key := string(b)
		switch {
		case err != nil || r["key_object"] != "ok" || key == "" || r["credentials"] != fp(key):
			t.Errorf("%s: the key id the toy wrote (%v) does not match its report %q", c.name, err, res.Message)
		case key == e.minio.AccessKey || key == callers.AccessKey:
			t.Errorf("%s: the engine got the sidecar's or the call's keys", c.name)
		case r["store"] != "s3://steward" || r["endpoint"] != "127.0.0.1:7480" || r["region"] != "us-east-1":
			t.Errorf("%s: the engine's store is not its gateway: %q", c.name, res.Message)
		case r["gateway"] != "ok" || r["wrong_key"] != "InvalidAccessKeyId":
			t.Errorf("%s: at the gateway the key gives %q and another key id %q; want ok and InvalidAccessKeyId", c.name, r["gateway"], r["wrong_key"])
		case slices.Contains(keys, key):
			t.Errorf("%s: the key of an earlier invocation again", c.name)
		}
		for _, endpoint := range []string{e.minio.Endpoint, own.Endpoint} {
			if code := direct(endpoint, key); code != "InvalidAccessKeyId" {
				t.Errorf("%s: the engine's key against MinIO itself (%s): %q, want InvalidAccessKeyId", c.name, endpoint, code)
			}
		}
		keys = append(keys, key)
	}
	other := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://ledger-e2e/" + randID("elsewhere"), Endpoint: e.minio.Endpoint}, Path: "ds"}
	res, err := toyMutate(t, e.c, other, nil, map[string]string{"report": "credentials"})
	var we *rpc.Error
	if !errors.Is(err, rpc.ErrStoreNotAllowed) || !errors.As(err, &we) || we.Code != rpc.CodeStoreNotAllowed {
		t.Fatalf("a call without credentials on a store off the list: %+v, %v; want -32016", res, err)
	}
	if strings.Contains(err.Error(), e.minio.SecretKey) {
		t.Fatal("the refusal quotes the sidecar's secret")
	}

	e.put("ds/data/theirs.parquet")
	res, err = toyMutate(t, e.c, ref, nil, map[string]string{"put": "data/theirs.parquet,data/mine.parquet", "delete": "data/theirs.parquet"})
	wantReport(t, res, err, "put data/theirs.parquet=AccessDenied;put data/mine.parquet=ok;delete data/theirs.parquet=AccessDenied")
	e.waitUsed(0)
	if !e.exists("ds/data/theirs.parquet") {
		t.Fatal("the existing object a worker named was deleted")
	}
	if e.exists("ds/data/mine.parquet") {
		t.Fatal("the object the abandoned invocation wrote survived")
	}
	if strings.Contains(e.logs.String(), e.minio.SecretKey) {
		t.Fatal("the sidecar logged its own secret key")
	}
}
