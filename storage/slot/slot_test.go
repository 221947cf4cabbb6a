package slot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/slot"
)

func TestManifestVersion(t *testing.T) {
	for name, want := range map[string]int64{
		"00000000000000000004.manifest":  4, // built-in engine
		"4.manifest":                     4, // Lance V1
		"18446744073709551611.manifest":  4, // Lance V2: u64max - 4
		"latest_version_hint.json":       0, // not a manifest
		"d4.manifest":                    0, // a detached manifest
		"0.manifest":                     0, // no version 0
		"-4.manifest":                    0, // no sign
		"123456789012345678901.manifest": 0, // 21 digits
		"9223372036854775808.manifest":   0, // past int64, not 20 digits
		".manifest":                      0, // empty
	} {
		v, ok := slot.ManifestVersion(name)
		if ok != (want != 0) || v != want {
			t.Errorf("ManifestVersion(%q) = %d, %v; want %d", name, v, ok, want)
		}
	}
}

// TestManifestNames: each naming of a version reads back as that version.
func TestManifestNames(t *testing.T) {
	for _, v := range []int64{1, 4, 1 << 40} {
		for _, name := range slot.ManifestNames(v) {
			if got, ok := slot.ManifestVersion(name); !ok || got != v {
				t.Errorf("ManifestVersion(%q) = %d, %v; want %d", name, got, ok, v)
			}
		}
	}
}

func TestClaimKeyStaysClean(t *testing.T) {
	for _, inv := range []string{".", ".."} {
		k := slot.ClaimKey("ds", 4, inv)
		for seg := range strings.SplitSeq(k, "/") {
			if seg == "." || seg == ".." {
				t.Errorf("ClaimKey(%q) = %q has a dot segment", inv, k)
			}
		}
	}
}

// TestDecide walks every path of Decide over a real local store: what storage holds decides,
// never anyone's word.
func TestDecide(t *testing.T) {
	ctx := context.Background()
	const ds, inv = "lake/sales", "inv-1"
	manifest := "lake/sales/_versions/4.manifest"
	put := func(t *testing.T, st storage.Store, key string, b []byte) {
		t.Helper()
		if err := st.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(t *testing.T, st storage.Store, c slot.Claim) {
		t.Helper()
		b, _ := json.Marshal(c)
		put(t, st, slot.ClaimKey(ds, 4, inv), b)
	}
	old := time.Now().Add(-2 * slot.ClaimGrace).UnixMilli()
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, st storage.Store)
		live    bool
		want    slot.Outcome
		fenced  bool
		written bool // a fence claim was written
	}{
		{"no claim: fenced", func(*testing.T, storage.Store) {}, false, slot.NotCommitted, true, true},
		{"no claim, live: fenced all the same", func(*testing.T, storage.Store) {}, true, slot.NotCommitted, true, true},
		{"commit claim, manifest holds its bytes", func(t *testing.T, st storage.Store) {
			claim(t, st, slot.Commit(inv, manifest, []byte("mine")))
			put(t, st, manifest, []byte("mine"))
		}, false, slot.Committed, false, false},
		{"commit claim, manifest holds other bytes", func(t *testing.T, st storage.Store) {
			c := slot.Commit(inv, manifest, []byte("mine"))
			c.UnixMS = old
			claim(t, st, c)
			put(t, st, manifest, []byte("theirs"))
		}, false, slot.NotCommitted, false, false},
		{"commit claim, no manifest, live", func(t *testing.T, st storage.Store) {
			claim(t, st, slot.Commit(inv, manifest, []byte("mine")))
		}, true, slot.Unknown, false, false},
		{"commit claim, no manifest, gateway gone, within the grace", func(t *testing.T, st storage.Store) {
			claim(t, st, slot.Commit(inv, manifest, []byte("mine")))
		}, false, slot.Unknown, false, false},
		{"commit claim, no manifest, gateway gone, past the grace: fenced", func(t *testing.T, st storage.Store) {
			c := slot.Commit(inv, manifest, []byte("mine"))
			c.UnixMS = old
			claim(t, st, c)
		}, false, slot.NotCommitted, true, true},
		{"fence claim", func(t *testing.T, st storage.Store) {
			claim(t, st, slot.Claim{Invocation: inv, Kind: slot.KindFence})
		}, false, slot.NotCommitted, true, false},
		{"a claim of another invocation under this one's key: corrupt", func(t *testing.T, st storage.Store) {
			claim(t, st, slot.Claim{Invocation: "inv-2", Kind: slot.KindCommit})
		}, false, slot.NotCommitted, false, false},
		{"not JSON: corrupt", func(t *testing.T, st storage.Store) {
			put(t, st, slot.ClaimKey(ds, 4, inv), []byte("{"))
		}, false, slot.NotCommitted, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := storage.NewLocalStore(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			tc.setup(t, st)
			v, err := slot.Decide(ctx, st, ds, 3, inv, tc.live)
			if err != nil || v.Outcome != tc.want || v.Fenced != tc.fenced {
				t.Fatalf("Decide: %+v %v; want %s fenced=%v", v, err, tc.want, tc.fenced)
			}
			c, err := slot.Read(ctx, st, ds, 4, inv)
			if tc.written && (err != nil || c.Kind != slot.KindFence) {
				t.Fatalf("the fence claim: %+v %v", c, err)
			}
			if v2, err := slot.Decide(ctx, st, ds, 3, inv, tc.live); err != nil || v2.Outcome != v.Outcome || v2.Fenced != v.Fenced {
				t.Fatalf("decided again: %+v %v, first %+v", v2, err, v)
			}
		})
	}
}
