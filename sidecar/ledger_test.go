package sidecar

import (
	"testing"

	"github.com/cba1309c/steward/rpc"
)

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
