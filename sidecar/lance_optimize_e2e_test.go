package sidecar_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// lanceCoverage is lancectl coverage: Lance's own statistics of one index.
type lanceCoverage struct {
	Version            int64   `json:"version"`
	Segments           int     `json:"segments"`
	IndexedRows        int64   `json:"indexed_rows"`
	UnindexedRows      int64   `json:"unindexed_rows"`
	UnindexedFragments int64   `json:"unindexed_fragments"`
	Fragments          []int64 `json:"fragments"`
	Covered            []int64 `json:"covered"`
}

// TestLanceOptimizeIndexesAppendedFragments: BTREE and IVF_PQ indexes built through the sidecar,
// rows appended by Lance (a new fragment), then OPTIMIZE through the sidecar commits at pinned+1
// and Lance's own library reads the index covering every fragment, the new one included (no
// unindexed row). One killed right before its commit is fenced and custody deletes what it
// wrote. A second OPTIMIZE finds nothing to do (ALREADY_OPTIMIZED, no version); an
// OPTIMIZE of a missing index is NOT_FOUND; custody settles and no orphan is left.
func TestLanceOptimizeIndexesAppendedFragments(t *testing.T) {
	lanceStores(t, func(t *testing.T, onMinIO bool) {
		l := newLanceSidecar(t, onMinIO)
		const path = "events"
		var created struct {
			Version int64 `json:"version"`
		}
		l.ctl(&created, "create", l.uri(path), "--rows", "4000", "--fragments", "2", "--dim", "16")
		pinned := created.Version
		indexes := []struct{ name, column, typ string }{{"idx_id", "id", "BTREE"}, {"idx_vec", "vec", "IVF_PQ"}}
		params := map[string]map[string]string{"IVF_PQ": {"num_partitions": "2", "num_sub_vectors": "4"}}
		for _, ix := range indexes {
			res := l.mutate(l.lanceParams(randID("inv-"), path, pinned, rpc.OpCreate, ix.name, ix.column, ix.typ, params[ix.typ]))
			if res.Code != rpc.NativeOK || res.CommittedVersion != pinned+1 {
				t.Fatalf("CREATE %s: %+v", ix.typ, res)
			}
			pinned++
		}
		var appended struct {
			Version   int64   `json:"version"`
			Fragments []int64 `json:"fragments"`
		}
		l.ctl(&appended, "append", l.uri(path), "--rows", "1000")
		pinned = appended.Version
		for _, ix := range indexes {
			t.Run(ix.typ, func(t *testing.T) {
				l.t = t
				var before lanceCoverage
				l.ctl(&before, "coverage", l.uri(path), ix.name)
				if before.UnindexedRows != 1000 {
					t.Fatalf("before OPTIMIZE Lance reads %+v: want the 1000 appended rows unindexed", before)
				}
				// Killed at its gate, right before its manifest: undecided, then fenced, and
				// what it wrote (the delta segment) is custody's to delete.
				crashed := randID("inv-")
				p := l.lanceParams(crashed, path, pinned, rpc.OpOptimize, ix.name, "", "", nil)
				p.Fault = "crash_before_commit"
				deletedBefore := l.status().Deleted
				if res := l.mutate(p); res.Phase != rpc.PhaseIndeterminate || res.Code != rpc.ReasonWorkerLost {
					t.Fatalf("OPTIMIZE crashed before its commit: %+v", res)
				}
				if r := l.resolveLance(crashed, path, pinned); r.Outcome != rpc.OutcomeNotCommitted || !r.Fenced {
					t.Fatalf("resolve of a crashed OPTIMIZE: %+v", r)
				}
				l.settled()
				if l.status().Deleted == deletedBefore {
					t.Fatal("custody deleted nothing after a crashed OPTIMIZE")
				}
				inv := randID("inv-")
				res := l.mutate(l.lanceParams(inv, path, pinned, rpc.OpOptimize, ix.name, "", "", nil))
				if res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeOK || res.CompletionReason != rpc.CompletionCommitted ||
					res.CommittedVersion != pinned+1 || res.IndexUUID == "" {
					t.Fatalf("OPTIMIZE: %+v", res)
				}
				l.gatewayWroteAll(inv)
				checkStages(t, l.progressOf(inv), []string{"optimize"})
				var after lanceCoverage
				l.ctl(&after, "coverage", l.uri(path), ix.name)
				if after.Version != pinned+1 || after.UnindexedRows != 0 || after.UnindexedFragments != 0 ||
					after.IndexedRows != 5000 || !slices.Equal(after.Covered, appended.Fragments) {
					t.Fatalf("after OPTIMIZE Lance reads %+v; the dataset's fragments are %v", after, appended.Fragments)
				}
				t.Logf("OPTIMIZE %s: committed v%d (%d ms in the domain); Lance before: %d indexed / %d unindexed rows, segments cover %v; after: %d / %d, %d segment(s) cover %v of %v",
					ix.typ, res.CommittedVersion, res.WallMs, before.IndexedRows, before.UnindexedRows, before.Covered,
					after.IndexedRows, after.UnindexedRows, after.Segments, after.Covered, after.Fragments)
				pinned++
				if r := l.resolveLance(inv, path, pinned-1); r.Outcome != rpc.OutcomeCommitted {
					t.Errorf("resolve of a committed OPTIMIZE: %+v", r)
				}
				again := l.mutate(l.lanceParams(randID("inv-"), path, pinned, rpc.OpOptimize, ix.name, "", "", nil))
				if again.Code != rpc.NativeOK || again.CompletionReason != rpc.CompletionAlreadyOptimized || again.CommittedVersion != 0 {
					t.Fatalf("OPTIMIZE of an up-to-date index: %+v", again)
				}
				l.settled()
				l.noUntrackedIndex(path)
			})
		}
		l.t = t
		missing := l.mutate(l.lanceParams(randID("inv-"), path, pinned, rpc.OpOptimize, "idx_nope", "", "", nil))
		if missing.Phase != rpc.PhaseNativeReturn || missing.Code != rpc.NativeNotFound || missing.CommittedVersion != 0 {
			t.Fatalf("OPTIMIZE of a missing index: %+v", missing)
		}
		if v := l.latestLance(path); v != pinned {
			t.Fatalf("the dataset moved to v%d without a commit (want v%d)", v, pinned)
		}
	})
}

// noUntrackedIndex fails the test if the dataset's _indices/ holds an object that no version's
// manifest references (Lance's tracked_files): an OPTIMIZE supersedes segments that older
// versions still name, so "listed at the latest version" is too narrow here.
func (l *lanceSidecar) noUntrackedIndex(path string) {
	l.t.Helper()
	var chain struct {
		Files []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	l.ctl(&chain, "chain", l.uri(path))
	tracked := map[string]bool{}
	for _, f := range chain.Files {
		tracked[f.Path] = true
	}
	for _, k := range l.objects(path) {
		if rest, ok := strings.CutPrefix(k, path+"/"); ok && strings.HasPrefix(rest, "_indices/") && !tracked[rest] {
			l.t.Errorf("index object %s is referenced by no version", k)
		}
	}
}

// gatewayWroteAll fails the test if inv's gateway refused it anything but a read of an absent
// key (Lance looks before it writes): what the engine wrote, the gateway let through.
func (l *lanceSidecar) gatewayWroteAll(inv string) {
	l.t.Helper()
	for _, line := range strings.Split(l.logs.String(), "\n") {
		var e struct {
			Message    string `json:"@message"`
			Invocation string `json:"invocation"`
			Method     string `json:"method"`
			Code       string `json:"code"`
			Path       string `json:"path"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.Message != "gateway refused a request" || e.Invocation != inv {
			continue
		}
		if !(e.Code == "NoSuchKey" && (e.Method == "HEAD" || e.Method == "GET")) {
			l.t.Errorf("the gateway refused %s %s: %s", e.Method, e.Path, e.Code)
		}
	}
}

// latestLance is the dataset's latest version as Lance reads it.
func (l *lanceSidecar) latestLance(path string) int64 {
	var d struct {
		Version int64 `json:"version"`
	}
	l.ctl(&d, "describe", l.uri(path))
	return d.Version
}

// TestBuiltinRefusesOptimize: the built-in engine has no delta segments; OPTIMIZE is NATIVE_RETURN
// NOT_SUPPORTED with a message naming the way out, and nothing is committed.
func TestBuiltinRefusesOptimize(t *testing.T) {
	e := newSidecar(t)
	e.makeDataset("ds", 1000)
	if res := e.mutate(e.params(randID("inv-"), "ds", 1, rpc.OpCreate, "by_id", "id", rpc.IndexBTree)); res.Code != rpc.NativeOK {
		t.Fatalf("CREATE: %+v", res)
	}
	p := e.params(randID("inv-"), "ds", 2, rpc.OpOptimize, "by_id", "", "")
	res := e.mutate(p)
	if res.Phase != rpc.PhaseNativeReturn || res.Code != rpc.NativeNotSupported || res.CommittedVersion != 0 ||
		!strings.Contains(res.Message, "REPLACE") {
		t.Fatalf("OPTIMIZE on the built-in engine: %+v", res)
	}
	if v := e.latest("ds"); v != 2 {
		t.Fatalf("latest v%d after a refused OPTIMIZE, want 2", v)
	}
}
