package custody

import (
	"errors"
	"testing"
)

func TestCheckNames(t *testing.T) {
	for _, tc := range []struct {
		name           string
		keys, prefixes []string
		ok             bool
	}{
		{"data file", []string{"wh/ev/data/a.parquet"}, nil, true},
		{"index folder and txn", []string{"wh/ev/_transactions/1-u.txn"}, []string{"wh/ev/_indices/u/"}, true},
		{"another dataset", []string{"wh/other/data/a"}, nil, false},
		{"a sibling sharing the name", []string{"wh/ev2/data/a"}, nil, false},
		{"the version chain", []string{"wh/ev/_versions/3.manifest"}, nil, false},
		{"steward's claims", nil, []string{"wh/ev/_steward/claims/"}, false},
		{"a whole folder", nil, []string{"wh/ev/_indices/"}, false},
		{"the dataset itself", nil, []string{"wh/ev/"}, false},
		{"a top-level key", []string{"wh/ev/latest_version_hint.json"}, nil, false},
		{"another folder", []string{"wh/ev/_deletions/1.arrow"}, nil, false},
		{"an unknown folder", nil, []string{"wh/ev/tmp/x/"}, false},
		{"an index prefix", nil, []string{"wh/ev/_indices/u/"}, true},
		{"dot dot", []string{"wh/ev/data/../../x/a"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNames("wh/ev", "", tc.keys, tc.prefixes)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrForeignName)) {
				t.Errorf("%v", err)
			}
		})
	}
}

// TestRecordVersions: a built-in engine's record stays version 1 (older sidecars read it); another
// engine's is version 2, which an older sidecar refuses rather than fence a foreign format.
func TestRecordVersions(t *testing.T) {
	for _, tc := range []struct {
		engine string
		v      int
	}{{"", 1}, {"builtin", 1}, {"lance", 2}} {
		b, err := record{Path: "p", Pinned: 1, Engine: tc.engine}.encode()
		if err != nil {
			t.Fatal(err)
		}
		r, err := decodeRecord(b)
		if err != nil || r.V != tc.v || r.Engine != tc.engine {
			t.Errorf("engine %q: %+v %v", tc.engine, r, err)
		}
	}
	if _, err := decodeRecord([]byte(`{"v":1,"engine":"lance"}`)); err == nil {
		t.Error("a version-1 record naming another engine was accepted")
	}
}

// TestCheckNamesBuildArea: a segment build's invocations may also reserve in their build's own
// area, and nowhere else under _steward/.
func TestCheckNamesBuildArea(t *testing.T) {
	const area = "_steward/builds/b1/"
	for _, tc := range []struct {
		name, build, key string
		ok               bool
	}{
		{"the build's area", area, "wh/ev/_steward/builds/b1/train/u/ivf.lance", true},
		{"another build's area", area, "wh/ev/_steward/builds/b2/x", false},
		{"no build", "", "wh/ev/_steward/builds/b1/x", false},
		{"steward's claims", area, "wh/ev/_steward/claims/x", false},
		{"dot dot out of it", area, "wh/ev/_steward/builds/b1/../../claims/x", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkNames("wh/ev", tc.build, []string{tc.key}, nil)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrForeignName)) {
				t.Errorf("%v", err)
			}
		})
	}
	if err := checkNames("wh/ev", area, nil, []string{"wh/ev/" + area}); !errors.Is(err, ErrForeignName) {
		t.Errorf("the whole build area as a prefix: %v", err)
	}
}
