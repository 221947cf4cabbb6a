package sidecar_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
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

// TestWorkerReservesOnlyNewNames drives a real sidecar with a real engine of the public protocol
// (internal/testengine) on the local store: it may reserve new names of its dataset's data and
// index folders only; an existing object (another writer's data file), the slot's manifest, a
// shared file, another folder or another dataset are refused, each with its reason in the
// reserved frame; past its --ledger-quota a reservation is refused whole. When the failed
// invocation is abandoned, only what it was granted is deleted: the dataset it named is intact.
func TestWorkerReservesOnlyNewNames(t *testing.T) {
	bin := buildTestEngine(t)
	e := newSidecarWithEnv(t, os.Environ(), "--state-dir", t.TempDir(), "--engine", "toy="+bin+" --settle fence",
		"--ledger-quota", "8", "--ledger-capacity", "64")
	if q := e.c.Info().Limits.LedgerQuota; q != 8 {
		t.Fatalf("hello limits.ledger_quota %d, want 8", q)
	}
	e.makeDataset("ds", 100)
	e.makeDataset("other", 100)
	ctx := context.Background()
	var theirs string
	for info, err := range e.store.List(ctx, "ds/data/") {
		if err != nil {
			t.Fatal(err)
		}
		theirs = strings.TrimPrefix(info.Key, "ds/")
		break
	}
	ref := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + e.root}, Path: "ds"}
	res, err := toyMutate(t, e.c, ref, nil, map[string]string{"reserve_keys": strings.Join([]string{
		"data/new-1.bin", theirs, "_versions/00000000000000000002.manifest", "_versions/latest_version_hint.json",
		"_deletions/1.arrow", "_indices/toy-a/", "../other/data/x", "_transactions/1-u.txn"}, ",")})
	wantReport(t, res, err, strings.Join([]string{
		"data/new-1.bin=granted", theirs + "=refused:exists", "_versions/00000000000000000002.manifest=refused:foreign",
		"_versions/latest_version_hint.json=refused:foreign", "_deletions/1.arrow=refused:foreign", "_indices/toy-a/=granted",
		"../other/data/x=refused:foreign", "_transactions/1-u.txn=granted"}, ";"))
	// The quota: 8 keys fit, 9 are refused whole.
	res, err = toyMutate(t, e.c, ref, nil, map[string]string{"reserve_many": "8"})
	wantReport(t, res, err, "granted=8 refusal=none")
	res, err = toyMutate(t, e.c, ref, nil, map[string]string{"reserve_many": "9"})
	wantReport(t, res, err, "granted=0 refusal=quota")
	waitTickets(t, e.c, 0)
	if _, err := e.store.Stat(ctx, "ds/data/new-1.bin"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("the granted, abandoned key survived: %v", err)
	}
	if _, err := e.store.Stat(ctx, "ds/"+theirs); err != nil {
		t.Fatalf("the existing object a worker named was touched: %v", err)
	}
	for _, path := range []string{"ds", "other"} {
		if _, err := dataset.Open(ctx, e.store, path, 1); err != nil {
			t.Errorf("dataset %s after the hostile reservations: %v", path, err)
		}
	}
	for name, want := range map[string]float64{"steward_ledger_invocation_quota": 8, "steward_ledger_quota_refusals_total": 1,
		"steward_ledger_existing_name_refusals_total": 1} {
		if got := metricOf(t, e.c, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

// TestWorkerGetsOnlyItsStoresKeys: a sidecar with its own keys for one MinIO prefix. A worker of
// a call without credentials on that store gets the sidecar's keys in its request frame; on a
// file store it gets none; a call with its own credentials gets those, never the sidecar's; a
// call without credentials on another prefix of the same bucket is refused (-32016) before any
// worker starts. On the allowed store an existing object is refused to the worker (checked with
// the sidecar's keys) and survives the invocation's abandon.
func TestWorkerGetsOnlyItsStoresKeys(t *testing.T) {
	bin := buildTestEngine(t)
	e := newLedgerEnv(t, "--engine", "toy="+bin+" --settle fence")
	if c := e.c.Info().Credentials; c == nil || c.Source != "file" || len(c.AllowStores) != 1 {
		t.Fatalf("hello credentials %+v: want source file and the one allowed store", c)
	}
	fp := func(ak string) string {
		sum := sha256.Sum256([]byte(ak))
		return "credentials=" + hex.EncodeToString(sum[:8])
	}
	ref := rpc.DatasetRef{Store: e.spec, Path: "ds"}
	res, err := toyMutate(t, e.c, ref, nil, map[string]string{"report": "credentials"})
	wantReport(t, res, err, fp(e.minio.AccessKey))
	res, err = toyMutate(t, e.c, rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + t.TempDir()}, Path: "ds"}, nil,
		map[string]string{"report": "credentials"})
	wantReport(t, res, err, "credentials=none")
	res, err = toyMutate(t, e.c, ref, &rpc.Credentials{AccessKey: "the-callers-own", SecretKey: "s3cr3t"}, map[string]string{"report": "credentials"})
	wantReport(t, res, err, fp("the-callers-own"))
	other := rpc.DatasetRef{Store: rpc.StoreSpec{URL: "s3://ledger-e2e/" + randID("elsewhere"), Endpoint: e.minio.Endpoint}, Path: "ds"}
	res, err = toyMutate(t, e.c, other, nil, map[string]string{"report": "credentials"})
	var we *rpc.Error
	if !errors.Is(err, rpc.ErrStoreNotAllowed) || !errors.As(err, &we) || we.Code != rpc.CodeStoreNotAllowed {
		t.Fatalf("a call without credentials on a store off the list: %+v, %v; want -32016", res, err)
	}
	if strings.Contains(err.Error(), e.minio.SecretKey) {
		t.Fatal("the refusal quotes the sidecar's secret")
	}

	e.put("ds/data/theirs.parquet")
	res, err = toyMutate(t, e.c, ref, nil, map[string]string{"reserve_keys": "data/theirs.parquet,data/mine.parquet"})
	wantReport(t, res, err, "data/theirs.parquet=refused:exists;data/mine.parquet=granted")
	e.waitUsed(0)
	if !e.exists("ds/data/theirs.parquet") {
		t.Fatal("the existing object a worker named was deleted")
	}
	if strings.Contains(e.logs.String(), e.minio.SecretKey) {
		t.Fatal("the sidecar logged its own secret key")
	}
}
