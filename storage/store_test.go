package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/storagetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testminio.Cleanup()
	os.Exit(code)
}

func TestContractLocal(t *testing.T) {
	storagetest.RunContract(t, func(t *testing.T) storage.Store { return storagetest.NewLocal(t) })
}

func TestContractS3(t *testing.T) {
	srv := testminio.Shared(t)
	storagetest.RunContract(t, func(t *testing.T) storage.Store {
		return storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	})
}

func TestContractPrefixed(t *testing.T) {
	storagetest.RunContract(t, func(t *testing.T) storage.Store {
		return storage.WithPrefix(storagetest.NewLocal(t), "tenant/ds")
	})
}

func TestOpenStorePrefixS3(t *testing.T) {
	srv := testminio.Shared(t)
	ctx := context.Background()
	raw := storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	s, err := storage.OpenStore(ctx, storage.StoreConfig{
		Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: raw.Bucket(), Prefix: "team/a",
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "x", strings.NewReader("1"), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Stat(ctx, "team/a/x"); err != nil {
		t.Fatalf("prefix not applied: %v", err)
	}
	infos, err := storage.ListAll(ctx, s, "")
	if err != nil || len(infos) != 1 || infos[0].Key != "x" {
		t.Fatalf("list through prefix = %v, %v", infos, err)
	}
}

// TestS3Outage stops a dedicated MinIO: every operation must fail with ErrUnavailable (never
// ErrNotFound, which would let a resolver conclude something), and work again after restart.
func TestS3Outage(t *testing.T) {
	srv := testminio.Dedicated(t)
	s := storagetest.NewS3(t, srv.Endpoint, srv.AccessKey, srv.SecretKey)
	ctx := context.Background()
	if err := s.Put(ctx, "k", strings.NewReader("v"), 1); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	checks := map[string]error{}
	checks["put"] = s.Put(ctx, "k2", strings.NewReader("v"), 1)
	checks["put-if-absent"] = s.PutIfAbsent(ctx, "k3", strings.NewReader("v"), 1)
	_, checks["get"] = s.Get(ctx, "k")
	_, checks["stat"] = s.Stat(ctx, "missing")
	_, checks["list"] = storage.ListAll(ctx, s, "")
	checks["delete"] = s.DeleteBatch(ctx, []string{"k"})[0].Err
	for op, err := range checks {
		if !errors.Is(err, storage.ErrUnavailable) {
			t.Errorf("%s during outage: %v, want ErrUnavailable", op, err)
		}
	}
	t.Logf("outage errors surfaced in %v", time.Since(start))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	b, err := storage.ReadAll(context.Background(), s, "k", 1<<20)
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, storage.ErrUnavailable) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond) // a restarted MinIO answers 503 while it initializes
		b, err = storage.ReadAll(context.Background(), s, "k", 1<<20)
	}
	if err != nil || string(b) != "v" {
		t.Fatalf("after restart: %q, %v", b, err)
	}
}

func TestOpenStoreUnreachable(t *testing.T) {
	_, err := storage.OpenStore(context.Background(), storage.StoreConfig{
		Kind: storage.KindS3, Endpoint: "127.0.0.1:1", Bucket: "b", AccessKey: "ak", SecretKey: "TOPSECRET", MaxRetries: 1,
	})
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "TOPSECRET") {
		t.Fatal("secret leaked into error")
	}
}

func TestOpenStoreBadCredentials(t *testing.T) {
	srv := testminio.Shared(t)
	_, err := storage.OpenStore(context.Background(), storage.StoreConfig{
		Kind: storage.KindS3, Endpoint: srv.Endpoint, Bucket: storagetest.RandomName("b"),
		AccessKey: srv.AccessKey, SecretKey: "WRONG-SECRET-VALUE",
	})
	if !errors.Is(err, storage.ErrPermission) {
		t.Fatalf("err = %v, want ErrPermission", err)
	}
	if strings.Contains(err.Error(), "WRONG-SECRET-VALUE") {
		t.Fatal("secret leaked into error")
	}
}

func TestStoreConfigRedacts(t *testing.T) {
	cfg := storage.StoreConfig{Kind: storage.KindS3, Endpoint: "e", Bucket: "b", AccessKey: "ak", SecretKey: "s3cr3t-value"}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("open", "store", cfg)
	for name, out := range map[string]string{
		"v": fmt.Sprintf("%v", cfg), "+v": fmt.Sprintf("%+v", cfg), "#v": fmt.Sprintf("%#v", cfg),
		"s": fmt.Sprint(cfg), "slog": buf.String(),
	} {
		if strings.Contains(out, "s3cr3t-value") {
			t.Errorf("%s leaks the secret: %s", name, out)
		}
	}
}

func TestOpenStoreConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  storage.StoreConfig
	}{
		{"unknown kind", storage.StoreConfig{Kind: "ftp"}},
		{"local without root", storage.StoreConfig{Kind: storage.KindLocal}},
		{"s3 without bucket", storage.StoreConfig{Kind: storage.KindS3, Endpoint: "x:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := storage.OpenStore(context.Background(), tc.cfg); !errors.Is(err, storage.ErrInvalidConfig) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

func TestValidKey(t *testing.T) {
	for key, want := range map[string]bool{
		"a": true, "a/b.c": true, "_versions/0001.manifest": true,
		"": false, "/a": false, "a/": false, "a//b": false, "a/./b": false, "..": false, "a\x00": false,
	} {
		if got := storage.ValidKey(key); got != want {
			t.Errorf("ValidKey(%q) = %v", key, got)
		}
	}
}

func ExampleOpenStore() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "steward-example-")
	defer os.RemoveAll(dir)
	s, err := storage.OpenStore(ctx, storage.StoreConfig{Kind: storage.KindLocal, Root: dir})
	if err != nil {
		panic(err)
	}
	_ = s.PutIfAbsent(ctx, "slot", strings.NewReader("mine"), 4)
	err = s.PutIfAbsent(ctx, "slot", strings.NewReader("yours"), 5)
	fmt.Println(errors.Is(err, storage.ErrExists))
	// Output: true
}
