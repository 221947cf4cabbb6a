package campaign

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testbin"
	"github.com/cba1309c/steward/internal/testenv"
)

func TestLanceManifestVersion(t *testing.T) {
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
		if v, ok := lanceManifestVersion(name); v != want || ok != (want > 0) {
			t.Errorf("%s: %d %t, want %d", name, v, ok, want)
		}
	}
}

func TestOwnedKey(t *testing.T) {
	owned := map[string]bool{"run/ds/_indices/u1/": true, "run/ds/_transactions/3-a.txn": true}
	for key, want := range map[string]bool{
		"run/ds/_indices/u1/page_data.lance":  true,
		"run/ds/_indices/u1/sub/part.lance":   true,
		"run/ds/_indices/u2/page_data.lance":  false,
		"run/ds/_transactions/3-a.txn":        true,
		"run/ds/_transactions/3-b.txn":        false,
		"run/ds/_indices/u1":                  false, // the prefix owns what is under it, not a sibling name
		"run/ds/_steward/slots/00000004.json": false,
	} {
		if got := ownedKey(owned, key); got != want {
			t.Errorf("%s: owned %t, want %t", key, got, want)
		}
	}
}

// TestCheckClaims feeds the claim check chains with each defect it must refuse, and one it must
// accept (a fence over a dead invocation's commit claim).
func TestCheckClaims(t *testing.T) {
	chainOf := func(claims map[int64]lanceClaim, vs ...version) *chain {
		c := &chain{path: "ds", setup: 2, commits: map[string]int64{}, claims: claims}
		c.versions = append([]version{{Version: 1}, {Version: 2}}, vs...)
		return c
	}
	commit := version{Version: 3, ReadVersion: 2, Kind: kindCommit, Invocation: "a"}
	fence := version{Version: 3, ReadVersion: 2, Kind: kindFence, Invocation: "a"}
	for _, tc := range []struct {
		name  string
		c     *chain
		wants []string
	}{
		{"claimed commit", chainOf(map[int64]lanceClaim{3: {"a", kindCommit}}, commit), nil},
		{"fence over a commit claim", chainOf(map[int64]lanceClaim{3: {"a", kindCommit}}, fence), nil},
		{"unclaimed", chainOf(map[int64]lanceClaim{}, commit), []string{"unclaimed-version"}},
		{"claimed by another", chainOf(map[int64]lanceClaim{3: {"b", kindCommit}}, commit), []string{"claim-mismatch"}},
		{"commit over a fence claim", chainOf(map[int64]lanceClaim{3: {"a", kindFence}}, commit), []string{"claim-mismatch"}},
		{"dangling", chainOf(map[int64]lanceClaim{3: {"a", kindCommit}, 4: {"b", kindCommit}}, commit), []string{"dangling-claim"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &run{rep: &Report{}}
			r.checkClaims(tc.c)
			var got []string
			for _, v := range r.rep.Violations {
				got = append(got, v.Check)
			}
			if !slices.Equal(got, tc.wants) {
				t.Errorf("violations %v, want %v", r.rep.Violations, tc.wants)
			}
		})
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
