package ledger

import (
	"bytes"
	"errors"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		r    record
	}{
		{"held", record{state: stHeld, owner: Owner{Kind: Invocation, ID: "inv-1"}}},
		{"abandoned", record{state: stAbandoned, owner: Owner{Kind: HostTxn, ID: "t"}}},
		{"offered", record{state: stHeld, owner: Owner{Kind: Invocation, ID: "a"}, to: Owner{Kind: HostTxn, ID: "b"}, seq: 300}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeRecord(encodeRecord(tc.r))
			if err != nil || got != tc.r {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(record{state: stHeld, owner: Owner{Kind: Invocation, ID: "inv-1"}}))
	f.Add(encodeRecord(record{state: stHeld, owner: Owner{Kind: Invocation, ID: "a"}, to: Owner{Kind: HostTxn, ID: "b"}, seq: 7}))
	f.Add([]byte{1, 2, 2, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		// A record that decodes re-encodes to the same bytes (the encoding is canonical
		// except for non-minimal varints, which must at least decode to the same record).
		again, err := decodeRecord(encodeRecord(r))
		if err != nil || again != r {
			t.Fatalf("round trip of %x: %+v vs %+v, %v", b, r, again, err)
		}
		if enc := encodeRecord(r); len(enc) > len(b) || (len(enc) == len(b) && !bytes.Equal(enc, b)) {
			t.Fatalf("canonical encoding %x longer than or unlike input %x", enc, b)
		}
	})
}

func FuzzDecodePairKey(f *testing.F) {
	f.Add(pairKey(Owner{Kind: Invocation, ID: "a"}, Owner{Kind: HostTxn, ID: "b"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		from, to, err := decodePairKey(b)
		if err != nil {
			return
		}
		if !bytes.Equal(pairKey(from, to), b) {
			t.Fatalf("pair key %x re-encodes differently", b)
		}
	})
}
