package campaign

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/slot"
)

// TestLanceManifestNames: the campaign reads a Lance dataset's latest version from its
// `_versions/` listing through slot.ManifestVersion, as the gateway reads the commit slot; it must
// read both of Lance's namings and nothing else.
func TestLanceManifestNames(t *testing.T) {
	// version 0: not a manifest name.
	for name, want := range map[string]int64{
		"18446744073709551614.manifest": 1, // V2 naming: MaxUint64 - v
		"18446744073709551612.manifest": 3,
		"7.manifest":                    7, // V1 naming
		"latest_version_hint.json":      0,
		"x.manifest":                    0,
		"0.manifest":                    0,
		"sub/3.manifest":                0,
	} {
		if v, ok := slot.ManifestVersion(name); v != want || ok != (want > 0) {
			t.Errorf("%s: %d %t, want %d", name, v, ok, want)
		}
	}
}

func TestOwnedKey(t *testing.T) {
	owned := map[string]bool{"run/ds/_indices/u1/": true, "run/ds/_transactions/3-a.txn": true}
	for key, want := range map[string]bool{
		"run/ds/_indices/u1/page_data.lance":                   true,
		"run/ds/_indices/u1/sub/part.lance":                    true,
		"run/ds/_indices/u2/page_data.lance":                   false,
		"run/ds/_transactions/3-a.txn":                         true,
		"run/ds/_transactions/3-b.txn":                         false,
		"run/ds/_indices/u1":                                   false, // the prefix owns what is under it, not a sibling name
		"run/ds/_steward/claims/00000000000000000004/inv.json": false,
	} {
		if got := ownedKey(owned, key); got != want {
			t.Errorf("%s: owned %t, want %t", key, got, want)
		}
	}
}

// TestCheckClaims feeds the claim check a chain (versions 1-2 of the setup, version 3 as each
// case has it), jobs a and b admitted at 2, and claims with each defect it must refuse, beside the
// states it must accept: a's commit claim holding version 3, b's commit claim lost to a's manifest
// and b's fence.
func TestCheckClaims(t *testing.T) {
	manifest3 := "ds/_versions/18446744073709551612.manifest"
	commitClaim := func(inv string, holds, landed bool) slotClaim {
		return slotClaim{version: 3, invocation: inv, claim: slot.Claim{Invocation: inv, Kind: slot.KindCommit, Key: manifest3}, holds: holds, landed: landed}
	}
	fenceClaim := func(inv string, v int64) slotClaim {
		return slotClaim{version: v, invocation: inv, claim: slot.Claim{Invocation: inv, Kind: slot.KindFence}}
	}
	byA := version{Version: 3, ReadVersion: 2, Kind: kindCommit, Invocation: "a"}
	elsewhere := commitClaim("b", false, true)
	elsewhere.claim.Key = "ds/_versions/5.manifest"
	byInv := map[string]dispatch.Job{
		"a": {ID: "ja", InvocationID: "a", Dataset: rpc.DatasetRef{Path: "ds"}, AdmittedVersion: 2},
		"b": {ID: "jb", InvocationID: "b", Dataset: rpc.DatasetRef{Path: "ds"}, AdmittedVersion: 2},
		"o": {ID: "jo", InvocationID: "o", Dataset: rpc.DatasetRef{Path: "other"}, AdmittedVersion: 2},
	}
	for _, tc := range []struct {
		name   string
		v3     *version
		claims []slotClaim
		wants  []string
	}{
		{"commit, a loser and a fence", &byA, []slotClaim{commitClaim("a", true, true), commitClaim("b", false, true), fenceClaim("b", 3)}, nil},
		{"fence past the latest version", nil, []slotClaim{fenceClaim("a", 3)}, nil},
		{"unclaimed", &byA, nil, []string{"unclaimed-version"}},
		{"manifest is not the claimed one", &byA, []slotClaim{commitClaim("a", false, true)}, []string{"unclaimed-version"}},
		{"fenced invocation committed", &byA, []slotClaim{fenceClaim("a", 3)}, []string{"unclaimed-version", "fenced-commit"}},
		{"claim holds, chain names another", &byA, []slotClaim{commitClaim("a", true, true), commitClaim("b", true, true)}, []string{"claim-mismatch"}},
		{"claimed manifest never landed", nil, []slotClaim{commitClaim("b", false, false)}, []string{"open-claim"}},
		{"claim names another version", nil, []slotClaim{elsewhere}, []string{"claim-mismatch"}},
		{"claim of no job", nil, []slotClaim{fenceClaim("z", 3)}, []string{"ghost-claim"}},
		{"claim of another dataset's job", nil, []slotClaim{fenceClaim("o", 3)}, []string{"ghost-claim"}},
		{"claim past the admitted slot", nil, []slotClaim{fenceClaim("b", 4)}, []string{"claim-wrong-slot"}},
		{"corrupt", nil, []slotClaim{{version: 3, invocation: "b", err: slot.ErrCorrupt}}, []string{"claim-corrupt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &chain{path: "ds", setup: 2, commits: map[string]int64{}, claims: tc.claims}
			c.versions = []version{{Version: 1}, {Version: 2}}
			if tc.v3 != nil {
				c.versions = append(c.versions, *tc.v3)
			}
			r := &run{rep: &Report{}}
			r.checkClaims(c, byInv)
			var got []string
			for _, v := range r.rep.Violations {
				got = append(got, v.Check)
			}
			if !slices.Equal(got, tc.wants) {
				t.Errorf("violations %v, want %v", r.rep.Violations, tc.wants)
			}
			if r.rep.Claims != len(tc.claims) {
				t.Errorf("%d claims counted, want %d", r.rep.Claims, len(tc.claims))
			}
		})
	}
}

// TestReadClaims writes claims as the gateway and slot.Decide write them into a real local store
// and reads them back: a commit claim whose manifest holds, one whose slot another writer's
// manifest took, one whose manifest never landed, a fence, a corrupt claim, and keys under
// _steward/claims/ that are not claim keys (left to the orphan check).
func TestReadClaims(t *testing.T) {
	ctx := context.Background()
	st, err := storage.NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, body string) {
		t.Helper()
		if err := st.Put(ctx, key, strings.NewReader(body), int64(len(body))); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(v int64, c slot.Claim) {
		t.Helper()
		if err := slot.Put(ctx, st, "ds", v, c); err != nil {
			t.Fatal(err)
		}
	}
	m3, m4 := "ds/_versions/3.manifest", "ds/_versions/4.manifest"
	put(m3, "manifest of a")
	claim(3, slot.Commit("a", m3, []byte("manifest of a")))
	claim(3, slot.Commit("b", m3, []byte("manifest of b")))
	claim(4, slot.Commit("c", m4, []byte("manifest of c")))
	claim(3, slot.Claim{Invocation: "d", Kind: slot.KindFence})
	put(slot.ClaimKey("ds", 3, "e"), "not json")
	put("ds/_steward/claims/3/f.json", `{"invocation":"f","kind":"fence"}`)
	put("ds/_steward/claims/00000000000000000003/g.txt", "x")
	referenced := map[string]bool{}
	claims, err := readClaims(ctx, st, "ds", referenced)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		v            int64
		inv, kind    string
		corrupt      bool
		holds, lands bool
	}
	var have []got
	for _, c := range claims {
		have = append(have, got{c.version, c.invocation, c.claim.Kind, errors.Is(c.err, slot.ErrCorrupt), c.holds, c.landed})
	}
	want := []got{
		{3, "a", slot.KindCommit, false, true, true},
		{3, "b", slot.KindCommit, false, false, true},
		{3, "d", slot.KindFence, false, false, false},
		{3, "e", "", true, false, false},
		{4, "c", slot.KindCommit, false, false, false},
	}
	if !slices.Equal(have, want) {
		t.Errorf("claims\n got %+v\nwant %+v", have, want)
	}
	if len(referenced) != len(want) {
		t.Errorf("known keys %v: want the %d claims only", referenced, len(want))
	}
	for k, must := range referenced {
		if must {
			t.Errorf("claim %s marked as one that must exist", k)
		}
	}
}

// TestLanceConfig: a Lance campaign draws only the kinds that apply to the Lance engine, and takes
// the Lance defaults.
func TestLanceConfig(t *testing.T) {
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(t, "Lance engine not installed: "+err.Error())
	}
	base := Config{Steward: "/bin/true", MinIOBinary: "/bin/true", Engine: EngineLance, Lance: LanceTools{Python: py, Dir: dir}}
	c, err := base.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Kinds, LanceKinds()) || c.Rows != 5000 || c.ExecuteDeadline != 20*time.Second {
		t.Errorf("defaults: kinds %v, rows %d, deadline %s", c.Kinds, c.Rows, c.ExecuteDeadline)
	}
	for _, k := range []string{KindHang, KindForkBomb, KindHostKill} {
		bad := base
		bad.Kinds = []string{k}
		if _, err := bad.withDefaults(); !errors.Is(err, ErrConfig) {
			t.Errorf("kind %s on Lance: %v, want ErrConfig", k, err)
		}
	}
	bad := base
	bad.Lance.Python = "relative/python"
	if _, err := bad.withDefaults(); !errors.Is(err, ErrConfig) {
		t.Errorf("relative Lance python: %v, want ErrConfig", err)
	}
}
