package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testminio"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
	"github.com/cba1309c/steward/storage/storagetest"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testminio.Cleanup()
	os.Exit(code)
}

const (
	bucket  = "steward"
	dataset = "lake/sales"
	inv     = "inv-1"
	key     = "AKINV1"
)

// upstreams are the stores a gateway serves from: a local directory and a real MinIO.
func upstreams() map[string]func(t testing.TB) storage.Store {
	return map[string]func(t testing.TB) storage.Store{
		"local": func(t testing.TB) storage.Store {
			st, err := storage.NewLocalStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return st
		},
		"minio": func(t testing.TB) storage.Store {
			srv := testminio.Shared(t)
			st, err := storage.NewS3Store(context.Background(), storage.StoreConfig{Kind: storage.KindS3,
				Endpoint: srv.Endpoint, Bucket: storagetest.RandomName("gw-"), AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { storagetest.RemoveBucket(t, st) })
			return st
		},
	}
}

// recorder is a Custodian that notes each key and checks it is not yet in the store: custody
// must come before the first byte.
type recorder struct {
	st       storage.Store
	mu       sync.Mutex
	keys     []string
	refuse   string // a key to refuse
	early    []string
	released []string
}

func (c *recorder) Release(_ context.Context, k string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.released = append(c.released, k)
	return nil
}

func (c *recorder) Reserve(ctx context.Context, k string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k == c.refuse {
		return errors.New("refused by the test")
	}
	if _, err := c.st.Stat(ctx, k); err == nil {
		c.early = append(c.early, k)
	}
	c.keys = append(c.keys, k)
	return nil
}

type fixture struct {
	up   storage.Store
	gw   *gateway.Gateway
	cl   *minio.Client
	core *minio.Core
	cust *recorder
	addr string
}

func start(t *testing.T, up storage.Store, lim gateway.Limits) *fixture {
	t.Helper()
	return startAs(t, up, lim, inv)
}

func startAs(t *testing.T, up storage.Store, lim gateway.Limits, invocation string) *fixture {
	t.Helper()
	return startWith(t, up, func(c *gateway.Config) { c.Limits, c.Invocation = lim, invocation })
}

// startWith starts a gateway on the tests' defaults as edit leaves them.
func startWith(t *testing.T, up storage.Store, edit func(*gateway.Config)) *fixture {
	t.Helper()
	cust := &recorder{st: up}
	cfg := gateway.Config{Upstream: up, Bucket: bucket, Dataset: dataset, Invocation: inv,
		Pinned: 3, AccessKey: key, Custody: cust, StageDir: filepath.Join(t.TempDir(), "stage")}
	edit(&cfg)
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ln) }()
	t.Cleanup(func() {
		gw.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	opts := &minio.Options{Creds: credentials.NewStaticV4(key, "any-secret", ""), Region: "us-east-1"}
	cl, err := minio.New(ln.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	core, err := minio.NewCore(ln.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{up: up, gw: gw, cl: cl, core: core, cust: cust, addr: ln.Addr().String()}
}

func (f *fixture) put(t *testing.T, k string, body []byte) error {
	t.Helper()
	opts := minio.PutObjectOptions{}
	_, err := f.cl.PutObject(context.Background(), bucket, k, bytes.NewReader(body), int64(len(body)), opts)
	return err
}

func code(err error) string { return minio.ToErrorResponse(err).Code }

func TestObjectsRoundTrip(t *testing.T) {
	for name, open := range upstreams() {
		t.Run(name, func(t *testing.T) {
			f := start(t, open(t), gateway.Limits{})
			ctx := context.Background()
			body := bytes.Repeat([]byte("0123456789"), 100_000)
			k := dataset + "/data/part-0.bin"
			if err := f.put(t, k, body); err != nil {
				t.Fatal(err)
			}
			// Ranges: middle, open-ended, suffix.
			for _, rg := range []struct{ a, b int64 }{{10, 19}, {999_990, 0}, {0, 0}} {
				o := minio.GetObjectOptions{}
				if rg.b > 0 {
					o.SetRange(rg.a, rg.b)
				} else if rg.a > 0 {
					o.SetRange(rg.a, 0)
				}
				obj, err := f.cl.GetObject(ctx, bucket, k, o)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(obj)
				if err != nil {
					t.Fatal(err)
				}
				want := body[rg.a:]
				if rg.b > 0 {
					want = body[rg.a : rg.b+1]
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("range %v: %d bytes, want %d", rg, len(got), len(want))
				}
			}
			info, err := f.cl.StatObject(ctx, bucket, k, minio.StatObjectOptions{})
			if err != nil || info.Size != int64(len(body)) {
				t.Fatalf("stat: %v %d", err, info.Size)
			}
			// A streamed put of unknown length goes multipart through minio-go.
			big := bytes.Repeat([]byte{7}, 17<<20)
			mk := dataset + "/_indices/u1/part.idx"
			if _, err := f.cl.PutObject(ctx, bucket, mk, io.MultiReader(bytes.NewReader(big)), -1, minio.PutObjectOptions{PartSize: 5 << 20}); err != nil {
				t.Fatal(err)
			}
			if got := readUp(t, f.up, mk); !bytes.Equal(got, big) {
				t.Fatalf("multipart object: %d bytes, want %d", len(got), len(big))
			}
			// Copy within the dataset.
			ck := dataset + "/_indices/u2/part.idx"
			if _, err := f.cl.CopyObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: ck}, minio.CopySrcOptions{Bucket: bucket, Object: mk}); err != nil {
				t.Fatal(err)
			}
			if got := readUp(t, f.up, ck); !bytes.Equal(got, big) {
				t.Fatalf("copied object: %d bytes", len(got))
			}
			// Delete what this invocation wrote.
			if err := f.cl.RemoveObject(ctx, bucket, ck, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.up.Stat(ctx, ck); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("deleted object: %v", err)
			}
			rec := f.gw.Record()
			if want := []string{k, mk, ck}; !sameSet(rec.Written, want) || !sameSet(f.cust.keys, want) {
				t.Fatalf("written %v, custody %v, want %v", rec.Written, f.cust.keys, want)
			}
			if len(f.cust.early) > 0 {
				t.Fatalf("custody reserved keys already in the store: %v", f.cust.early)
			}
			if rec.Bytes < int64(len(body)+2*len(big)) || rec.Slot != gateway.SlotNone {
				t.Fatalf("record %+v", rec)
			}
		})
	}
}

func readUp(t *testing.T, st storage.Store, k string) []byte {
	t.Helper()
	b, err := storage.ReadAll(context.Background(), st, k, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestListing(t *testing.T) {
	for name, open := range upstreams() {
		t.Run(name, func(t *testing.T) {
			up := open(t)
			f := start(t, up, gateway.Limits{})
			ctx := context.Background()
			var want []string
			for i := range 250 {
				k := fmt.Sprintf("%s/data/f%05d", dataset, i)
				want = append(want, k)
				if err := up.Put(ctx, k, strings.NewReader("x"), 1); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range []string{dataset + "/_indices/a/1", dataset + "/_indices/b/1", "lake/salesX/data/f", "other/x"} {
				if err := up.Put(ctx, k, strings.NewReader("x"), 1); err != nil {
					t.Fatal(err)
				}
			}
			var got []string
			for o := range f.cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: dataset + "/data/", Recursive: true, MaxKeys: 100}) {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				got = append(got, o.Key)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("paged listing: %d keys, want %d", len(got), len(want))
			}
			got = nil
			for o := range f.cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: dataset + "/"}) {
				if o.Err != nil {
					t.Fatal(o.Err)
				}
				got = append(got, o.Key)
			}
			if want := []string{dataset + "/_indices/", dataset + "/data/"}; !slices.Equal(got, want) {
				t.Fatalf("delimited listing %v, want %v", got, want)
			}
			for _, p := range []string{"", "lake/", "lake/salesX/", "other/"} {
				for o := range f.cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: p, Recursive: true}) {
					if code(o.Err) != "AccessDenied" {
						t.Fatalf("listing %q outside the dataset: %v (key %q)", p, o.Err, o.Key)
					}
				}
			}
		})
	}
}

// TestRefusals: every way out of the dataset's writable folders is an S3 error, and nothing
// reaches the store.
func TestRefusals(t *testing.T) {
	up := upstreams()["local"](t)
	f := start(t, up, gateway.Limits{})
	ctx := context.Background()
	existing := dataset + "/data/old"
	if err := up.Put(ctx, existing, strings.NewReader("old"), 3); err != nil {
		t.Fatal(err)
	}
	if err := up.Put(ctx, "lake/other/data/x", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	pinnedManifest(t, up, "00000000000000000003.manifest") // the dataset's naming: the built-in one
	for _, c := range []struct{ key, code string }{
		{"lake/other/data/y", "AccessDenied"},                                // another dataset
		{dataset + "/../other/data/y", "AccessDenied"},                       // traversal
		{dataset + "/data/../../other/data/y", "AccessDenied"},               // traversal inside
		{dataset + "/data//y", "AccessDenied"},                               // empty segment
		{dataset + "/_versions/latest_version_hint.json", "InvalidArgument"}, // not a hint
		{dataset + "/_versions/other.json", "AccessDenied"},
		{dataset + "/_versions/00000000000000000009.manifest", "PreconditionFailed"}, // not pinned+1
		{dataset + "/_versions/4.manifest", "AccessDenied"},                          // pinned+1 in another naming
		{dataset + "/_versions/04.manifest", "AccessDenied"},                         // in no naming
		{dataset + "/_steward/claims/00000000000000000004/" + inv + ".json", "AccessDenied"},
		{dataset + "/_deletions/x", "AccessDenied"},
		{dataset + "/data", "AccessDenied"}, // a folder's name, not a key inside it
		{existing, "PreconditionFailed"},    // never overwritten
	} {
		if err := f.put(t, c.key, []byte("evil")); code(err) != c.code {
			t.Errorf("put %q: %v (%s), want %s", c.key, err, code(err), c.code)
		}
	}
	if got := readUp(t, up, existing); string(got) != "old" {
		t.Fatalf("existing object rewritten: %q", got)
	}
	// Raw requests: an encoded separator and dot segments the client library would clean.
	for _, p := range []string{"/steward/lake/sales/data/%2E%2E/%2E%2E/other/data/z", "/steward/lake%2Fother/data/z", "/other-bucket/lake/sales/data/z"} {
		if st := rawStatus(t, f.addr, http.MethodPut, p); st < 400 {
			t.Errorf("raw put %s: %d", p, st)
		}
	}
	// Deleting what the invocation did not write.
	if err := f.cl.RemoveObject(ctx, bucket, existing, minio.RemoveObjectOptions{}); code(err) != "AccessDenied" {
		t.Errorf("delete of another's object: %v", err)
	}
	// Another key id.
	other, _ := minio.New(f.addr, &minio.Options{Creds: credentials.NewStaticV4("AKSTOLEN", "x", ""), Region: "us-east-1"})
	if _, err := other.StatObject(ctx, bucket, existing, minio.StatObjectOptions{}); err == nil {
		t.Error("a request signed with another key id was served")
	}
	if _, err := up.Stat(ctx, "lake/other/data/y"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a refused put reached the store: %v", err)
	}
	if f.gw.Record().Refusals < 12 || len(f.gw.Record().Written) != 0 {
		t.Fatalf("record %+v", f.gw.Record())
	}
	if _, err := up.Stat(ctx, "lake/other/data/z"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("an encoded traversal reached the store: %v", err)
	}
}

// TestCommitSlot: the manifest of pinned+1 goes through the sidecar's claim; storage alone
// then decides the outcome.
func TestCommitSlot(t *testing.T) {
	for name, open := range upstreams() {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			t.Run("lands", func(t *testing.T) {
				f := start(t, open(t), gateway.Limits{})
				pinnedManifest(t, f.up, "18446744073709551612.manifest")
				mk := dataset + "/_versions/18446744073709551611.manifest" // Lance V2 name of version 4
				if err := f.put(t, mk, []byte("manifest-4")); err != nil {
					t.Fatal(err)
				}
				// The same bytes again (a client's retry) succeed; other bytes do not.
				if err := f.put(t, mk, []byte("manifest-4")); err != nil {
					t.Fatalf("retry: %v", err)
				}
				if err := f.put(t, mk, []byte("other")); code(err) != "PreconditionFailed" {
					t.Fatalf("other bytes: %v", err)
				}
				if rec := f.gw.Record(); rec.Slot != gateway.SlotLanded || rec.SlotKey != mk {
					t.Fatalf("record %+v", rec)
				}
				// Lance's version hint: only the committed version.
				hint := dataset + "/_versions/latest_version_hint.json"
				if err := f.put(t, hint, []byte(`{"version":9}`)); code(err) != "AccessDenied" {
					t.Fatalf("a hint of another version: %v", err)
				}
				if err := f.put(t, hint, []byte(`{"version":4}`)); err != nil {
					t.Fatalf("the hint of the committed version: %v", err)
				}
				f.gw.Close()
				v, err := slot.Decide(ctx, f.up, dataset, 3, inv, false)
				if err != nil || v.Outcome != slot.Committed {
					t.Fatalf("decide: %+v %v", v, err)
				}
				if v, _ := slot.Decide(ctx, f.up, dataset, 3, "inv-2", false); v.Outcome != slot.NotCommitted || !v.Fenced {
					t.Fatalf("another invocation: %+v", v)
				}
				if v, _ := slot.Decide(ctx, f.up, dataset, 3, inv, false); v.Outcome != slot.Committed {
					t.Fatalf("decided twice: %+v", v)
				}
			})
			t.Run("fenced first", func(t *testing.T) {
				f := start(t, open(t), gateway.Limits{})
				pinnedManifest(t, f.up, "00000000000000000003.manifest")
				v, err := slot.Decide(ctx, f.up, dataset, 3, inv, true)
				if err != nil || v.Outcome != slot.NotCommitted || !v.Fenced {
					t.Fatalf("fence: %+v %v", v, err)
				}
				mk := dataset + "/_versions/00000000000000000004.manifest"
				if err := f.put(t, mk, []byte("late")); code(err) != "PreconditionFailed" {
					t.Fatalf("a put after the fence: %v", err)
				}
				if _, err := f.up.Stat(ctx, mk); !errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("the late manifest landed: %v", err)
				}
				if rec := f.gw.Record(); rec.Slot != gateway.SlotRefused {
					t.Fatalf("record %+v", rec)
				}
				if err := f.put(t, dataset+"/_versions/latest_version_hint.json", []byte(`{"version":4}`)); code(err) != "AccessDenied" {
					t.Fatalf("a hint without a commit: %v", err)
				}
				// The fence closes the version to the fenced invocation only.
				other := startAs(t, f.up, gateway.Limits{}, "inv-2")
				if err := other.put(t, mk, []byte("next")); err != nil {
					t.Fatalf("another invocation after the fence: %v", err)
				}
				if v, err := slot.Decide(ctx, f.up, dataset, 3, "inv-2", false); err != nil || v.Outcome != slot.Committed {
					t.Fatalf("decide inv-2: %+v %v", v, err)
				}
			})
			t.Run("foreign writer", func(t *testing.T) {
				f := start(t, open(t), gateway.Limits{})
				pinnedManifest(t, f.up, "3.manifest")
				mk := dataset + "/_versions/4.manifest" // Lance V1 name
				if err := f.up.Put(ctx, mk, strings.NewReader("theirs"), 6); err != nil {
					t.Fatal(err)
				}
				if err := f.put(t, mk, []byte("mine")); code(err) != "PreconditionFailed" {
					t.Fatalf("put over a foreign manifest: %v", err)
				}
				f.gw.Close()
				if v, err := slot.Decide(ctx, f.up, dataset, 3, inv, false); err != nil || v.Outcome != slot.NotCommitted {
					t.Fatalf("decide: %+v %v", v, err)
				}
				if got := readUp(t, f.up, mk); string(got) != "theirs" {
					t.Fatalf("foreign manifest rewritten: %q", got)
				}
			})
		})
	}
}

func TestQuotas(t *testing.T) {
	up := upstreams()["local"](t)
	ctx := context.Background()
	t.Run("bytes", func(t *testing.T) {
		f := start(t, up, gateway.Limits{MaxBytes: 1 << 20})
		if err := f.put(t, dataset+"/data/a", make([]byte, 600<<10)); err != nil {
			t.Fatal(err)
		}
		if err := f.put(t, dataset+"/data/b", make([]byte, 600<<10)); code(err) != "QuotaExceeded" {
			t.Fatalf("second put: %v", err)
		}
		// Unknown length: cut off while streaming, nothing published.
		_, err := f.cl.PutObject(ctx, bucket, dataset+"/data/c", io.MultiReader(bytes.NewReader(make([]byte, 2<<20))), -1, minio.PutObjectOptions{PartSize: 5 << 20})
		if err == nil {
			t.Fatal("streamed put past the byte quota succeeded")
		}
		for _, k := range []string{"b", "c"} {
			if _, err := up.Stat(ctx, dataset+"/data/"+k); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("%s: %v", k, err)
			}
		}
	})
	t.Run("objects", func(t *testing.T) {
		f := start(t, up, gateway.Limits{MaxObjects: 3})
		for i := range 4 {
			err := f.put(t, fmt.Sprintf("%s/_indices/q/%d", dataset, i), []byte("x"))
			if (i < 3) != (err == nil) {
				t.Fatalf("object %d: %v", i, err)
			}
		}
	})
	t.Run("rate", func(t *testing.T) {
		f := start(t, up, gateway.Limits{RequestsPerSecond: 5, Burst: 5})
		slow := 0
		for range 20 { // raw requests: a client library retries SlowDown
			if rawStatus(t, f.addr, http.MethodHead, "/"+bucket+"/"+dataset+"/data/a") == http.StatusServiceUnavailable {
				slow++
			}
		}
		if slow < 10 {
			t.Fatalf("%d of 20 requests refused at 5/s", slow)
		}
	})
	t.Run("custody refusal", func(t *testing.T) {
		f := start(t, up, gateway.Limits{})
		f.cust.refuse = dataset + "/data/refused"
		if err := f.put(t, f.cust.refuse, []byte("x")); code(err) != "AccessDenied" {
			t.Fatalf("put: %v", err)
		}
		if _, err := up.Stat(ctx, f.cust.refuse); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("refused key written: %v", err)
		}
	})
}

// TestClosed: after Close nothing is served, and an upload cut by Close publishes nothing.
func TestClosed(t *testing.T) {
	up := upstreams()["local"](t)
	f := start(t, up, gateway.Limits{})
	ctx := context.Background()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		_, err := f.cl.PutObject(ctx, bucket, dataset+"/data/slow", pr, 1<<20, minio.PutObjectOptions{})
		errc <- err
	}()
	if _, err := pw.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := f.gw.Close(); err != nil {
		t.Fatal(err)
	}
	pw.CloseWithError(errors.New("closed"))
	if err := <-errc; err == nil {
		t.Fatal("an upload cut by Close succeeded")
	}
	if _, err := up.Stat(ctx, dataset+"/data/slow"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("cut upload published: %v", err)
	}
	if err := f.put(t, dataset+"/data/after", []byte("x")); err == nil {
		t.Fatal("a put after Close succeeded")
	}
}

// rawStatus sends one request signed (by name) with the invocation's key, without a client
// library's cleaning or retries, and returns its status.
func rawStatus(t *testing.T, addr, method, path string) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader("evil"))
	if err != nil {
		t.Fatal(err)
	}
	req.URL.RawPath = path // keep encoded separators as sent
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+key+"/20260101/us-east-1/s3/aws4_request")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// pinnedManifest puts the pinned version's (3) manifest under name: the naming the gateway
// expects the commit's manifest in.
func pinnedManifest(t *testing.T, up storage.Store, name string) {
	t.Helper()
	if err := up.Put(context.Background(), dataset+"/_versions/"+name, strings.NewReader("v3"), 2); err != nil {
		t.Fatal(err)
	}
}

// TestSealed: once the engine has answered its gateway takes no more writes (a lingering process
// of the domain writes nothing), and still serves reads.
func TestSealed(t *testing.T) {
	up := upstreams()["local"](t)
	f := start(t, up, gateway.Limits{})
	if err := f.put(t, dataset+"/data/before", []byte("x")); err != nil {
		t.Fatal(err)
	}
	f.gw.Seal()
	if err := f.put(t, dataset+"/data/after", []byte("x")); code(err) != "AccessDenied" {
		t.Fatalf("a put after the answer: %v", err)
	}
	if err := f.cl.RemoveObject(context.Background(), bucket, dataset+"/data/before", minio.RemoveObjectOptions{}); code(err) != "AccessDenied" {
		t.Fatalf("a delete after the answer: %v", err)
	}
	if _, err := f.cl.StatObject(context.Background(), bucket, dataset+"/data/before", minio.StatObjectOptions{}); err != nil {
		t.Fatalf("a read after the answer: %v", err)
	}
	if _, err := up.Stat(context.Background(), dataset+"/data/after"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("the sealed put landed: %v", err)
	}
}

// TestLostRaceReleasesCustody: another writer creates a key between its reservation and the
// invocation's create-only upload; the upload fails and custody of the key is given up, so the
// other writer's object is never deleted as the invocation's.
func TestLostRaceReleasesCustody(t *testing.T) {
	up := upstreams()["local"](t)
	cust := &racer{st: up}
	gw, err := gateway.New(gateway.Config{Upstream: up, Bucket: bucket, Dataset: dataset, Invocation: inv,
		Pinned: 3, AccessKey: key, Custody: cust, StageDir: filepath.Join(t.TempDir(), "stage")})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(ln)
	defer gw.Close()
	cl, _ := minio.New(ln.Addr().String(), &minio.Options{Creds: credentials.NewStaticV4(key, "s", ""), Region: "us-east-1"})
	k := dataset + "/data/raced"
	if _, err := cl.PutObject(context.Background(), bucket, k, strings.NewReader("mine"), 4, minio.PutObjectOptions{}); code(err) != "PreconditionFailed" {
		t.Fatalf("put: %v", err)
	}
	if !slices.Equal(cust.released, []string{k}) {
		t.Fatalf("released %v, want [%s]", cust.released, k)
	}
	if got := readUp(t, up, k); string(got) != "theirs" {
		t.Fatalf("the other writer's object: %q", got)
	}
}

// racer is a Custodian that lets another writer create each key right after reserving it.
type racer struct {
	st       storage.Store
	released []string
}

func (c *racer) Reserve(ctx context.Context, k string) error {
	return c.st.Put(ctx, k, strings.NewReader("theirs"), 6)
}

func (c *racer) Release(_ context.Context, k string) error {
	c.released = append(c.released, k)
	return nil
}

// TestConnectionBound: connections past the bound wait in the backlog, unserved, and are served
// once earlier ones close.
func TestConnectionBound(t *testing.T) {
	f := start(t, upstreams()["local"](t), gateway.Limits{MaxConnections: 2})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("GET / HTTP/1.1\r\n")); err != nil { // a request begun, never ended
			t.Fatal(err)
		}
		held = append(held, c)
	}
	done := make(chan int, 1)
	go func() { done <- rawStatus(t, f.addr, http.MethodHead, "/"+bucket) }()
	select {
	case st := <-done:
		t.Fatalf("a third connection was served (%d) while two were held", st)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case st := <-done:
		if st != http.StatusOK {
			t.Fatalf("the waiting request: %d", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting request was not served once a connection closed")
	}
	held[1].Close()
}

// TestBuildArea: a segment build's gateway writes its build's area too, no other build's, and
// (NoCommit) no manifest at all, the commit slot's included.
func TestBuildArea(t *testing.T) {
	up := upstreams()["local"](t)
	pinnedManifest(t, up, "00000000000000000003.manifest")
	f := startWith(t, up, func(c *gateway.Config) { c.BuildArea, c.NoCommit = "_steward/builds/b1/", true })
	for _, c := range []struct{ key, code string }{
		{dataset + "/_steward/builds/b1/train/u/ivf.lance", ""},
		{dataset + "/_indices/u/index.idx", ""},
		{dataset + "/_steward/builds/b2/x", "AccessDenied"},
		{dataset + "/_steward/claims/00000000000000000004/" + inv + ".json", "AccessDenied"},
		{dataset + "/_versions/00000000000000000004.manifest", "AccessDenied"},
	} {
		if err := f.put(t, c.key, []byte("x")); code(err) != c.code {
			t.Errorf("put %q: %v (%s), want %q", c.key, err, code(err), c.code)
		}
	}
	if rec := f.gw.Record(); rec.Slot != gateway.SlotNone {
		t.Fatalf("slot %v after a refused manifest, want none", rec.Slot)
	}
}
