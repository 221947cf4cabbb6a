package lancemanifest_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/cba1309c/steward/storage/lancemanifest"
)

// The testdata manifests were written by pylance 14.0.2: five fragments of 1,000 rows, ten rows
// deleted (version 2), then a BTREE "by_id" committed in two segments over fragments {0,2} and
// {1,3,4} (commit_existing_index_segments, version 3).
func TestDecodeLanceManifest(t *testing.T) {
	b, err := os.ReadFile("testdata/v3-btree-2seg.manifest")
	if err != nil {
		t.Fatal(err)
	}
	m, err := lancemanifest.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 3 {
		t.Fatalf("version %d, want 3", m.Version)
	}
	if got := m.FragmentIDs(); !slices.Equal(got, []uint64{0, 1, 2, 3, 4}) {
		t.Fatalf("fragments %v", got)
	}
	for _, f := range m.Fragments {
		if f.PhysicalRows != 1000 {
			t.Fatalf("fragment %d: %d physical rows, want 1000", f.ID, f.PhysicalRows)
		}
	}
	segs := m.Segments("by_id")
	want := []lancemanifest.Segment{
		{Name: "by_id", UUID: "1e1ab942-3194-4a0b-89ad-f02725eea149", Fragments: []uint32{0, 2}},
		{Name: "by_id", UUID: "544a0c67-e265-4595-88e6-f0b4c09bd2bc", Fragments: []uint32{1, 3, 4}},
	}
	if len(segs) != len(want) {
		t.Fatalf("segments %+v", segs)
	}
	for i := range want {
		if segs[i].UUID != want[i].UUID || !slices.Equal(segs[i].Fragments, want[i].Fragments) {
			t.Fatalf("segment %d: %+v, want %+v", i, segs[i], want[i])
		}
	}

	b1, err := os.ReadFile("testdata/v1.manifest")
	if err != nil {
		t.Fatal(err)
	}
	m1, err := lancemanifest.Decode(b1)
	if err != nil || m1.Version != 1 || len(m1.Fragments) != 5 || len(m1.Indices) != 0 {
		t.Fatalf("v1: %+v, %v", m1, err)
	}
}

func TestDecodeRefusesDamage(t *testing.T) {
	b, err := os.ReadFile("testdata/v3-btree-2seg.manifest")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"no trailer", func(b []byte) []byte { return b[:len(b)-1] }},
		{"position past the end", func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[len(b)-16:], uint64(len(b)))
			return b
		}},
		{"length past the end", func(b []byte) []byte {
			pos := binary.LittleEndian.Uint64(b[len(b)-16:])
			binary.LittleEndian.PutUint32(b[pos:], 1<<30)
			return b
		}},
		{"truncated message", func(b []byte) []byte {
			pos := binary.LittleEndian.Uint64(b[len(b)-16:])
			binary.LittleEndian.PutUint32(b[pos:], binary.LittleEndian.Uint32(b[pos:])-1)
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lancemanifest.Decode(tc.mut(bytes.Clone(b)))
			if !errors.Is(err, lancemanifest.ErrCorrupt) {
				t.Fatalf("err %v, want ErrCorrupt", err)
			}
		})
	}
}

// Containers of each kind, built by hand from the portable Roaring specification.
func TestDecodeRoaringContainers(t *testing.T) {
	le16 := func(v ...uint16) []byte {
		out := make([]byte, 0, 2*len(v))
		for _, x := range v {
			out = binary.LittleEndian.AppendUint16(out, x)
		}
		return out
	}
	le32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	cat := func(p ...[]byte) []byte { return bytes.Join(p, nil) }

	// No run containers: an array container {1, 7} under key 0 and a bitmap container holding
	// 0..4999 under key 1.
	bm := make([]byte, 8192)
	for i := 0; i < 5000; i++ {
		bm[i/8] |= 1 << (i % 8)
	}
	noRuns := cat(le32(12346), le32(2), le16(0, 1, 1, 4999), le32(0), le32(0), le16(1, 7), bm)
	got, err := lancemanifest.DecodeRoaring(noRuns)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5002 || got[0] != 1 || got[1] != 7 || got[2] != 1<<16 || got[5001] != 1<<16+4999 {
		t.Fatalf("no-runs bitmap: %d members, first %v", len(got), got[:3])
	}
	// With runs, one container (no offset header below 4 containers): runs 2..4 and 10..10.
	runs := cat(le32(12347|0<<16), []byte{1}, le16(0, 3), le16(2), le16(2, 2, 10, 0))
	got, err = lancemanifest.DecodeRoaring(runs)
	if err != nil || !slices.Equal(got, []uint32{2, 3, 4, 10}) {
		t.Fatalf("run bitmap: %v, %v", got, err)
	}
	for name, b := range map[string][]byte{
		"bad cookie":      le32(1),
		"truncated":       noRuns[:len(noRuns)-1],
		"descending keys": cat(le32(12346), le32(2), le16(1, 0, 0, 0), le32(0), le32(0), le16(1), le16(1)),
		"run overflow":    cat(le32(12347), []byte{1}, le16(0, 0), le16(1), le16(65535, 1)),
	} {
		if _, err := lancemanifest.DecodeRoaring(b); !errors.Is(err, lancemanifest.ErrCorrupt) {
			t.Errorf("%s: err %v, want ErrCorrupt", name, err)
		}
	}
}
