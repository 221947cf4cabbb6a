package custody_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/storagetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testminio.Cleanup()
	os.Exit(code)
}

// backends are the real stores custody is checked against: the local store and MinIO.
var backends = []struct {
	name string
	open func(t *testing.T) (storage.Store, rpc.StoreSpec)
}{
	{"local", func(t *testing.T) (storage.Store, rpc.StoreSpec) {
		st := storagetest.NewLocal(t)
		return st, rpc.StoreSpec{URL: rpc.FileStoreURL(st.Root())}
	}},
	{"minio", func(t *testing.T) (storage.Store, rpc.StoreSpec) {
		srv := testminio.Shared(t)
		st := storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
		return st, rpc.StoreSpec{URL: "s3://" + st.Bucket(), Endpoint: srv.Endpoint}
	}},
}

func openCustody(t *testing.T, st storage.Store, quota int) *custody.Custody {
	t.Helper()
	c, err := custody.Open(custody.Config{Path: filepath.Join(t.TempDir(), "ledger.db"), Quota: quota,
		OpenStore: func(context.Context, rpc.ParsedStore, *rpc.Credentials) (storage.Store, error) { return st, nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func put(t *testing.T, st storage.Store, key string) {
	t.Helper()
	if err := st.Put(context.Background(), key, strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
}

func exists(t *testing.T, st storage.Store, key string) bool {
	t.Helper()
	_, err := st.Stat(context.Background(), key)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestReserveOnlyNewNames: an engine may reserve only keys that do not exist yet, checked in
// storage before anything is journaled, all or nothing per call, within its quota; the abandon of
// what it did reserve deletes only its own objects, never the existing one it named; and the
// ledger holds no ticket at the end.
func TestReserveOnlyNewNames(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, spec := b.open(t)
			c := openCustody(t, st, 4)
			put(t, st, "ds/data/theirs.parquet")                        // another writer's object
			put(t, st, "other/_versions/00000000000000000001.manifest") // another dataset's manifest
			inv := custody.Invocation{ID: "inv-1", Store: parsed(t, spec), Path: "ds", Pinned: 1, Launched: time.Now()}
			held := func() int {
				t.Helper()
				s, err := c.Ledger().Status(ctx, custody.Owner(inv.ID))
				if err != nil {
					t.Fatal(err)
				}
				return s.Held
			}
			if err := c.Reserve(ctx, inv, []string{"ds/data/mine.parquet"}, nil); err != nil {
				t.Fatalf("a new name: %v", err)
			}
			err := c.Reserve(ctx, inv, []string{"ds/data/new.parquet", "ds/data/theirs.parquet"}, nil)
			if !errors.Is(err, custody.ErrNameExists) || !strings.Contains(err.Error(), "ds/data/theirs.parquet") {
				t.Fatalf("an existing name: %v; want ErrNameExists naming it", err)
			}
			if err := c.Reserve(ctx, inv, []string{"other/_versions/00000000000000000001.manifest"}, nil); !errors.Is(err, custody.ErrForeignName) {
				t.Fatalf("another dataset's manifest: %v; want ErrForeignName", err)
			}
			if err := c.Reserve(ctx, inv, []string{"ds/_versions/00000000000000000002.manifest"}, nil); !errors.Is(err, custody.ErrForeignName) {
				t.Fatalf("the slot's manifest: %v; want ErrForeignName", err)
			}
			if n := held(); n != 1 {
				t.Fatalf("holds %d tickets after refused calls, want 1 (nothing of a refused call is reserved)", n)
			}
			// The quota: 3 more fit, the 5th ticket is refused; a prefix counts as one.
			if err := c.Reserve(ctx, inv, []string{"ds/data/m2", "ds/data/m3"}, []string{"ds/_indices/u1/"}); err != nil {
				t.Fatalf("within the quota: %v", err)
			}
			if err := c.Reserve(ctx, inv, []string{"ds/data/m5"}, nil); !errors.Is(err, custody.ErrQuota) {
				t.Fatalf("past the quota: %v; want ErrQuota", err)
			}
			// Another invocation is not starved by the first.
			inv2 := custody.Invocation{ID: "inv-2", Store: inv.Store, Path: inv.Path, Pinned: 1, Launched: time.Now()}
			if err := c.Reserve(ctx, inv2, []string{"ds/data/n1"}, nil); err != nil {
				t.Fatalf("a second invocation: %v", err)
			}
			for _, k := range []string{"ds/data/mine.parquet", "ds/data/m2", "ds/_indices/u1/seg", "ds/data/n1"} {
				put(t, st, k)
			}
			c.Settle(ctx, inv.ID, rpc.OutcomeNotCommitted)
			c.Settle(ctx, inv2.ID, rpc.OutcomeNotCommitted)
			if err := c.Ledger().WaitIdle(ctx); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"ds/data/mine.parquet", "ds/data/m2", "ds/_indices/u1/seg", "ds/data/n1"} {
				if exists(t, st, k) {
					t.Errorf("%s survived its invocation's abandon", k)
				}
			}
			for _, k := range []string{"ds/data/theirs.parquet", "other/_versions/00000000000000000001.manifest"} {
				if !exists(t, st, k) {
					t.Errorf("%s, named by a refused reservation, was deleted", k)
				}
			}
			if s := c.Ledger().Stats(); s.Used != 0 || s.QuotaRefusals != 1 {
				t.Errorf("ledger %+v: want no ticket left and one quota refusal", s)
			}
		})
	}
}

// TestReserveExistenceCheckFailsClosed: a store that cannot answer the existence check refuses
// the reservation (nothing is journaled), rather than grant a name it knows nothing about.
func TestReserveExistenceCheckFailsClosed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testminio.Dedicated(t)
	st := storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	c := openCustody(t, st, 0)
	srv.Stop()
	inv := custody.Invocation{ID: "inv-down", Store: parsed(t, rpc.StoreSpec{URL: "s3://" + st.Bucket(), Endpoint: srv.Endpoint}), Path: "ds",
		Pinned: 1, Launched: time.Now()}
	var keys []string
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("ds/data/k%d", i))
	}
	err := c.Reserve(ctx, inv, keys, nil)
	if err == nil || errors.Is(err, custody.ErrNameExists) {
		t.Fatalf("reservation with the store down: %v; want a refusal", err)
	}
	if s := c.Ledger().Stats(); s.Used != 0 {
		t.Fatalf("%d tickets journaled by a refused reservation", s.Used)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReserveKey is one engine reservation of one new key (what the built-in engine does
// before each upload): the existence check in storage, then the journaled ticket, on the local
// store and on MinIO.
func BenchmarkReserveKey(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			st, spec := benchStore(b, be.name)
			c, err := custody.Open(custody.Config{Path: filepath.Join(b.TempDir(), "ledger.db"), Capacity: 1 << 20,
				OpenStore: func(context.Context, rpc.ParsedStore, *rpc.Credentials) (storage.Store, error) { return st, nil }})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			inv := custody.Invocation{ID: "inv-bench", Store: parsed(b, spec), Path: "ds", Pinned: 1, Launched: time.Now()}
			ctx := context.Background()
			b.Run("reserve", func(b *testing.B) {
				for i := range b.N {
					if err := c.Reserve(ctx, inv, []string{fmt.Sprintf("ds/data/k%d-%d", b.N, i)}, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
			// The part the existence check adds: one Stat of an absent key.
			b.Run("stat", func(b *testing.B) {
				for i := range b.N {
					if _, err := st.Stat(ctx, fmt.Sprintf("ds/data/absent-%d", i)); !errors.Is(err, storage.ErrNotFound) {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func benchStore(b *testing.B, name string) (storage.Store, rpc.StoreSpec) {
	if name == "local" {
		st := storagetest.NewLocal(b)
		return st, rpc.StoreSpec{URL: rpc.FileStoreURL(st.Root())}
	}
	srv := testminio.Shared(b)
	st := storagetest.NewS3(b, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	return st, rpc.StoreSpec{URL: "s3://" + st.Bucket(), Endpoint: srv.Endpoint}
}

// parsed is spec parsed, failing tb if it does not parse.
func parsed(tb testing.TB, spec rpc.StoreSpec) rpc.ParsedStore {
	tb.Helper()
	p, err := spec.Parse()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
