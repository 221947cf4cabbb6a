package sidecar

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/ledger"
)

// The ledger keeps only a store's name; after a restart without the journaled spec the cleanup
// worker reopens the store from the name alone.
func TestStoreNameRoundTrip(t *testing.T) {
	for _, spec := range []rpc.StoreSpec{
		{URL: "file:///var/data/warehouse"},
		{URL: "file:///tmp/with@sign"},
		{URL: "file:///tmp/with%20space"},
		{URL: "s3://bucket", Endpoint: "127.0.0.1:9000"},
		{URL: "s3://bucket/deep/prefix", Endpoint: "minio.internal:443"},
		{URL: "s3://bucket/a@b;c", Endpoint: "[::1]:9000", Secure: true, Region: "eu-west-1"},
	} {
		name, canon, err := storeName(spec)
		if err != nil {
			t.Fatalf("%+v: %v", spec, err)
		}
		got, err := parseStoreName(name)
		if err != nil || got != canon {
			t.Errorf("%+v: named %q, parsed back as %+v, %v; want %+v", spec, name, got, err, canon)
		}
	}
	for _, bad := range []string{"s3://bucket", "relative/path", "http://x@y", ""} {
		if _, err := parseStoreName(bad); !errors.Is(err, ledger.ErrInvalid) {
			t.Errorf("%q parsed: %v", bad, err)
		}
	}
}

// TestStoreNameOneSpelling: every spelling of one store gets one ledger name, so the tickets a
// host took under one spelling are seen by a sweep or a release under another; different stores
// (down to secure and region) never share a name.
func TestStoreNameOneSpelling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spellings []rpc.StoreSpec
	}{
		{"file trailing slash and escapes", []rpc.StoreSpec{
			{URL: "file:///srv/my data"}, {URL: "file:///srv/my%20data/"}, {URL: "FILE:/srv/my%20data"}}},
		{"s3 trailing slash, escapes, endpoint case and port", []rpc.StoreSpec{
			{URL: "s3://bucket/team/a", Endpoint: "minio.internal:9000"},
			{URL: "s3://bucket/team/a/", Endpoint: "MINIO.internal:9000"},
			{URL: "s3://bucket/team%2Fa", Endpoint: "minio.internal:09000"}}},
		{"s3 default port", []rpc.StoreSpec{
			{URL: "s3://bucket", Endpoint: "s3.example.com", Secure: true},
			{URL: "s3://bucket/", Endpoint: "s3.example.com:443", Secure: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, _, err := storeName(tc.spellings[0])
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.spellings[1:] {
				if n, _, err := storeName(s); err != nil || n != first {
					t.Errorf("%+v is named %q (%v), %+v is named %q", s, n, err, tc.spellings[0], first)
				}
			}
		})
	}
	seen := map[string]rpc.StoreSpec{}
	for _, s := range []rpc.StoreSpec{
		{URL: "file:///srv/a"}, {URL: "file:///srv/a%2520"}, {URL: "file:///srv/a%20"},
		{URL: "s3://bucket", Endpoint: "h:9000"}, {URL: "s3://bucket/p", Endpoint: "h:9000"},
		{URL: "s3://bucket", Endpoint: "h:9001"}, {URL: "s3://bucket", Endpoint: "h:9000", Secure: true},
		{URL: "s3://bucket", Endpoint: "h:9000", Region: "r1"}, {URL: "s3://bucket", Endpoint: "h:9000", Secure: true, Region: "r1"},
		{URL: "s3://bucket/p%40h:9000", Endpoint: "x:1"}, {URL: "s3://bucket/p", Endpoint: "h:9000", Region: "secure"},
	} {
		n, _, err := storeName(s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%+v and %+v share the name %q", s, other, n)
		}
		seen[n] = s
	}
}

// TestStoreNameFitsTheLedger: every name rpc accepts is one the ledger accepts.
func TestStoreNameFitsTheLedger(t *testing.T) {
	if rpc.MaxStoreName > ledger.MaxStoreName {
		t.Fatalf("rpc accepts store names of %d bytes, the ledger only %d", rpc.MaxStoreName, ledger.MaxStoreName)
	}
}

// FuzzObjectsParams feeds arbitrary JSON to every objects.* decoder: none may panic, and what
// validates stays within the documented bounds.
func FuzzObjectsParams(f *testing.F) {
	f.Add([]byte(`{"owner":{"kind":"host_txn","id":"t1"},"store":{"url":"s3://b/p","endpoint":"h:1"},"keys":["a/b"]}`))
	f.Add([]byte(`{"owner":{"kind":"host_txn","id":"t1"},"all":true}`))
	f.Add([]byte(`{"from":{"kind":"host_txn","id":"a"},"to":{"kind":"host_txn","id":"b"},"store":{"url":"file:///x"},"items":[{"seq":1,"key":"k"}]}`))
	f.Add([]byte(`{"from":{"kind":"host_txn","id":"a"},"to":{"kind":"host_txn","id":"b"},"up_to":9007199254740991}`))
	f.Add([]byte(`{"owner":{"kind":"invocation","id":"i"},"tickets":true}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if p, err := rpc.DecodeParams[rpc.ObjectsReserveParams](raw); err == nil {
			if len(p.Keys) == 0 || len(p.Keys) > rpc.MaxObjectKeys || p.Owner.Kind != rpc.OwnerHostTxn {
				t.Fatalf("reserve validated out of bounds: %+v", p)
			}
		}
		if p, err := rpc.DecodeParams[rpc.ObjectsReleaseParams](raw); err == nil && !p.All && (len(p.Keys) == 0 || p.Store == nil) {
			t.Fatalf("release validated without keys: %+v", p)
		}
		if p, err := rpc.DecodeParams[rpc.ObjectsTransferParams](raw); err == nil {
			for _, it := range p.Items {
				if it.Seq == 0 || it.Seq > rpc.MaxTransferSeq {
					t.Fatalf("transfer seq out of bounds: %+v", p)
				}
			}
		}
		if p, err := rpc.DecodeParams[rpc.ObjectsAcknowledgeParams](raw); err == nil && p.From == p.To {
			t.Fatalf("acknowledge validated a self pair: %+v", p)
		}
		_, _ = rpc.DecodeParams[rpc.ObjectsStatusParams](raw)
	})
}

// BenchmarkInvocationRecord is the custody cost an invocation pays once, on its first
// reservation: one durable bbolt commit of its record.
func BenchmarkInvocationRecord(b *testing.B) {
	j, err := openInvJournal(b.TempDir() + "/inv.db")
	if err != nil {
		b.Fatal(err)
	}
	defer j.close()
	spec := rpc.StoreSpec{URL: "s3://bucket/prefix", Endpoint: "127.0.0.1:9000"}
	rec := invRecord{Store: spec, Path: "warehouse/events", Pinned: 7}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := j.put(fmt.Sprintf("inv-%d", i), &rec, "", nil); err != nil {
			b.Fatal(err)
		}
	}
}
