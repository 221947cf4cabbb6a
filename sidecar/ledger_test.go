package sidecar

import (
	"fmt"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// The ledger keeps only a store's name; after a restart without the journaled spec the cleanup
// worker reopens the store from the name alone.
func TestStoreNameRoundTrip(t *testing.T) {
	for _, spec := range []rpc.StoreSpec{
		{URL: "file:///var/data/warehouse"},
		{URL: "file:///tmp/with@sign"},
		{URL: "s3://bucket", Endpoint: "127.0.0.1:9000"},
		{URL: "s3://bucket/deep/prefix", Endpoint: "minio.internal:443"},
	} {
		got, err := parseStoreName(storeName(spec))
		if err != nil || got != spec {
			t.Errorf("%+v: parsed back as %+v, %v", spec, got, err)
		}
	}
	for _, bad := range []string{"s3://bucket", "relative/path", "http://x@y", ""} {
		if _, err := parseStoreName(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
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
