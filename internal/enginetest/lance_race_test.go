package enginetest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/enginetest"
)

var bitmap = indexCase{"BITMAP", "category", nil}

// holdCommit returns Options that stop the engine at its last reservation (the transaction file,
// reserved right before the commit point), run during() there, and then let it go on.
func holdCommit(during func()) enginetest.Options {
	return enginetest.Options{OnReserve: func(r enginetest.Reserve) string {
		for _, k := range r.Keys {
			if strings.Contains(k, "/_transactions/") {
				during()
			}
		}
		return ""
	}}
}

func newDataset(t *testing.T, l *lanceEnv, s *store, path string, rows int) int64 {
	var created struct {
		Version int64 `json:"version"`
	}
	l.ctl(t, &created, "create", s.uri(path), "--rows", fmt.Sprint(rows))
	return created.Version
}

func settle(t *testing.T, l *lanceEnv, s *store, path, inv string, pinned int64, reaped bool) *enginetest.Settled {
	t.Helper()
	sess := run(t, l, "settle", settleReq(s, path, inv, pinned, reaped), enginetest.Options{})
	if sess.Settled == nil {
		t.Fatalf("no settled answer\n%s", sess.Stderr.String())
	}
	return sess.Settled
}

func raceStores(t *testing.T, l *lanceEnv) map[string]func() *store {
	return map[string]func() *store{
		"local": func() *store { return localStore(t) },
		"minio": func() *store { return minioStore(t, l) },
	}
}

// A real concurrent commit (plain pylance, which rebases) lands at pinned+1 while the engine
// holds its built index: the engine must answer COMMIT_CONFLICT with the observed latest version,
// and must not have committed anywhere (Lance would have rebased it to pinned+2).
func TestLanceConcurrentCommitIsConflict(t *testing.T) {
	l := needLance(t)
	for name, mk := range raceStores(t, l) {
		t.Run(name, func(t *testing.T) {
			s, path := mk(), "events"
			pinned := newDataset(t, l, s, path, 2000)
			sess := run(t, l, "mutate", mutateReq(s, path, "inv-late", pinned, "CREATE", bitmap, "idx_cat"), holdCommit(func() {
				l.ctl(t, nil, "index", s.uri(path), "id", "BTREE", "idx_other")
			}))
			r := sess.Result
			if r == nil || r.Phase != "NATIVE_RETURN" || r.Code != 8 || r.ObservedLatest != pinned+1 || r.CommittedVersion != 0 {
				t.Fatalf("result %+v, want COMMIT_CONFLICT (8) observing %d\n%s", r, pinned+1, sess.Stderr.String())
			}
			for _, v := range versions(t, l, s, path) {
				if v.Invocation == "inv-late" {
					t.Errorf("inv-late committed version %d", v.Version)
				}
			}
			st := settle(t, l, s, path, "inv-late", pinned, true)
			if st.Outcome != "NOT_COMMITTED" || st.Holder["kind"] != "foreign" {
				t.Errorf("settle: %+v", st)
			}
		})
	}
}

// The fence is written first (a settle in a fresh engine process while the invocation still holds
// its built index); the invocation's late commit then fails and the slot holds the fence.
func TestLanceFenceBeatsLateCommit(t *testing.T) {
	l := needLance(t)
	for name, mk := range raceStores(t, l) {
		t.Run(name, func(t *testing.T) {
			s, path := mk(), "events"
			pinned := newDataset(t, l, s, path, 2000)
			var fenced *enginetest.Settled
			sess := run(t, l, "mutate", mutateReq(s, path, "inv-x", pinned, "CREATE", bitmap, "idx_cat"), holdCommit(func() {
				fenced = settle(t, l, s, path, "inv-x", pinned, false)
			}))
			if fenced.Outcome != "NOT_COMMITTED" || !fenced.Fenced || fenced.Version != pinned+1 {
				t.Fatalf("fence: %+v", fenced)
			}
			if r := sess.Result; r == nil || r.Code != 8 || r.CommittedVersion != 0 {
				t.Fatalf("late commit: %+v, want COMMIT_CONFLICT\n%s", r, sess.Stderr.String())
			}
			vs := versions(t, l, s, path)
			if last := vs[len(vs)-1]; last.Version != pinned+1 || last.Kind != "fence" || last.Invocation != "inv-x" {
				t.Errorf("chain ends with %+v, want the fence of inv-x at %d", last, pinned+1)
			}
			if st := settle(t, l, s, path, "inv-x", pinned, false); st.Outcome != "NOT_COMMITTED" || !st.Fenced {
				t.Errorf("second settle: %+v", st)
			}
			if st := settle(t, l, s, path, "inv-y", pinned, false); st.Outcome != "NOT_COMMITTED" || st.Fenced || st.Holder["invocation"] != "inv-x" {
				t.Errorf("settle of another invocation: %+v", st)
			}
		})
	}
}

// The fence's claim alone (a settle that died between its claim and its manifest) already closes
// the slot: the manifest is still absent, Lance's own HEAD-then-PUT would let the commit through,
// and the claim refuses it. A later settle completes the fence.
func TestLanceClaimClosesTheSlot(t *testing.T) {
	l := needLance(t)
	s, path := localStore(t), "events"
	pinned := newDataset(t, l, s, path, 2000)
	claim := filepath.Join(s.root, path, "_steward", "slots", fmt.Sprintf("%020d.json", pinned+1))
	sess := run(t, l, "mutate", mutateReq(s, path, "inv-x", pinned, "CREATE", bitmap, "idx_cat"), holdCommit(func() {
		if err := os.MkdirAll(filepath.Dir(claim), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(claim, []byte(`{"invocation":"inv-x","kind":"fence","unix_ms":1}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}))
	if r := sess.Result; r == nil || r.Code != 8 || !strings.Contains(r.Message, "claimed by fence") {
		t.Fatalf("result %+v\n%s", r, sess.Stderr.String())
	}
	if got := latest(t, l, s, path); got != pinned {
		t.Fatalf("latest %d, want %d (nothing written)", got, pinned)
	}
	if st := settle(t, l, s, path, "inv-x", pinned, false); st.Outcome != "NOT_COMMITTED" || !st.Fenced {
		t.Errorf("settle: %+v", st)
	}
	if got := latest(t, l, s, path); got != pinned+1 {
		t.Errorf("the settle did not write the fence manifest: latest %d", got)
	}
}

// resolve tells whose commit occupies the slot.
func TestLanceSettleNamesTheHolder(t *testing.T) {
	l := needLance(t)
	s, path := localStore(t), "events"
	pinned := newDataset(t, l, s, path, 2000)
	sess := run(t, l, "mutate", mutateReq(s, path, "inv-a", pinned, "CREATE", bitmap, "idx_cat"), enginetest.Options{})
	if r := sess.Result; r == nil || r.Code != 0 || r.CommittedVersion != pinned+1 {
		t.Fatalf("result %+v\n%s", r, sess.Stderr.String())
	}
	if st := settle(t, l, s, path, "inv-a", pinned, false); st.Outcome != "COMMITTED" || st.Fenced {
		t.Errorf("settle inv-a: %+v", st)
	}
	if st := settle(t, l, s, path, "inv-b", pinned, false); st.Outcome != "NOT_COMMITTED" || st.Holder["invocation"] != "inv-a" || st.Holder["kind"] != "commit" {
		t.Errorf("settle inv-b: %+v", st)
	}
}

// An IVF_PQ build SIGKILLed mid-way: nothing committed, every object it wrote is under the prefix it
// reserved before writing, and its temp files were confined to the private TMPDIR (which the
// harness, like the sidecar, removes after the reap).
func TestLanceKilledBuildLeavesOnlyReserved(t *testing.T) {
	l := needLance(t)
	s, path := localStore(t), "events"
	pinned := newDataset(t, l, s, path, 20000)
	before := s.objects(t, path)
	ivf := indexCase{"IVF_PQ", "vec", map[string]string{"num_partitions": "16", "num_sub_vectors": "16"}}
	var sess *enginetest.Session
	reserved := make(chan struct{}, 4)
	opt := enginetest.Options{OnReserve: func(enginetest.Reserve) string { reserved <- struct{}{}; return "" }}
	sess, err := enginetest.Start(context.Background(), l.engine(), "mutate", mutateReq(s, path, "inv-k", pinned, "CREATE", ivf, "idx_vec"), opt)
	if err != nil {
		t.Fatal(err)
	}
	<-reserved
	time.Sleep(700 * time.Millisecond) // inside the build
	sess.Kill()
	if err := sess.Wait(); err == nil {
		t.Fatalf("the engine finished before the kill: %+v", sess.Result)
	}
	if ws, ok := sess.Cmd().ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("engine state %v", sess.Cmd().ProcessState)
	}
	t.Logf("temp files confined to the private TMPDIR at the kill: %v", sess.TempLeft)
	if _, err := os.Stat(sess.TempDir); !os.IsNotExist(err) {
		t.Errorf("private temp dir still there: %v", err)
	}
	custody(t, before, s.objects(t, path), sess.Reserves, path)
	if got := latest(t, l, s, path); got != pinned {
		t.Errorf("latest %d after a killed build", got)
	}
}
