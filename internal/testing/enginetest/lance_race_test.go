package enginetest_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
)

var bitmap = indexCase{"BITMAP", "category", nil}

// holdCommit returns Options that stop the engine at its transaction file (written through the
// gateway right before the manifest, once the index is built), run during() there, and then let
// it go on.
func holdCommit(during func()) enginetest.Options {
	var once sync.Once
	return enginetest.Options{OnWrite: func(key string) error {
		if strings.Contains(key, "/_transactions/") {
			once.Do(during)
		}
		return nil
	}}
}

func raceStores(t *testing.T, l *lanceEnv) map[string]func() *store {
	return map[string]func() *store{
		"local": func() *store { return localStore(t) },
		"minio": func() *store { return minioStore(t, l) },
	}
}

// notCommitted fails t unless the session answered COMMIT_CONFLICT (8) without a commit, its
// gateway landed no manifest, storage decides NOT_COMMITTED, and no version of the chain is the
// invocation's.
func notCommitted(t *testing.T, l *lanceEnv, s *store, path string, sess *enginetest.Session) slot.Verdict {
	t.Helper()
	if r := sess.Result; r == nil || r.Phase != "NATIVE_RETURN" || r.Code != 8 || r.CommittedVersion != 0 {
		t.Fatalf("result %+v, want COMMIT_CONFLICT (8)\n%s%s", r, sess.Stderr.String(), sess.GatewayLog.String())
	}
	if sess.Gateway.Slot == gateway.SlotLanded {
		t.Errorf("the gateway landed %s", sess.Gateway.SlotKey)
	}
	v := decide(t, sess)
	if v.Outcome != slot.NotCommitted {
		t.Errorf("decide: %+v, want NOT_COMMITTED", v)
	}
	for _, ver := range versions(t, l, s, path) {
		if ver.Invocation == sess.Invocation {
			t.Errorf("%s committed version %d", sess.Invocation, ver.Version)
		}
	}
	return v
}

// TestLanceConcurrentCommitIsConflict: a real concurrent commit (plain pylance, which rebases)
// lands at pinned+1 while the engine holds its built index. The engine's commit can land only at
// pinned+1 (its version gate and the gateway both refuse pinned+2), so it answers COMMIT_CONFLICT
// observing pinned+1, storage decides NOT_COMMITTED, and the chain ends with the other writer's
// version.
func TestLanceConcurrentCommitIsConflict(t *testing.T) {
	l := needLance(t)
	for name, mk := range raceStores(t, l) {
		t.Run(name, func(t *testing.T) {
			s, path := mk(), "events"
			pinned := newDataset(t, l, s, path, 2000)
			sess := run(t, l, mutateReq(s, path, "inv-late", pinned, "CREATE", bitmap, "idx_cat"), holdCommit(func() {
				l.ctl(t, nil, "index", s.uri(path), "id", "BTREE", "idx_other")
			}))
			v := notCommitted(t, l, s, path, sess)
			if r := sess.Result; r.ObservedLatest != pinned+1 {
				t.Errorf("observed latest %d, want %d", r.ObservedLatest, pinned+1)
			}
			if got := latest(t, l, s, path); got != pinned+1 {
				t.Errorf("latest %d, want the concurrent commit's %d", got, pinned+1)
			}
			t.Logf("gateway slot %s; decided %s: %s", sess.Gateway.Slot, v.Outcome, v.Reason)
		})
	}
}

// TestLanceFenceRefusesLateCommit: the invocation is fenced (slot.Decide on it while it is idle,
// holding its built index) before it commits. Its commit is then refused by the gateway (the
// claim finds the fence): COMMIT_CONFLICT, no manifest written, storage decides NOT_COMMITTED and
// fenced. The fence closes the version to that invocation only: another invocation pinned at the
// same version then commits it.
func TestLanceFenceRefusesLateCommit(t *testing.T) {
	l := needLance(t)
	for name, mk := range raceStores(t, l) {
		t.Run(name, func(t *testing.T) {
			s, path := mk(), "events"
			pinned := newDataset(t, l, s, path, 2000)
			var fence slot.Verdict
			sess := run(t, l, mutateReq(s, path, "inv-x", pinned, "CREATE", bitmap, "idx_cat"), holdCommit(func() {
				var err error
				if fence, err = slot.Decide(context.Background(), s.st, path, pinned, "inv-x", false); err != nil {
					t.Errorf("fence: %v", err)
				}
			}))
			if fence.Outcome != slot.NotCommitted || !fence.Fenced || fence.Holder.Kind != slot.KindFence {
				t.Fatalf("fence: %+v", fence)
			}
			v := notCommitted(t, l, s, path, sess)
			if sess.Gateway.Slot != gateway.SlotRefused || !v.Fenced {
				t.Errorf("gateway slot %s, decided %+v: want the commit refused and the invocation fenced", sess.Gateway.Slot, v)
			}
			if got := latest(t, l, s, path); got != pinned {
				t.Errorf("latest %d, want %d: a fence writes no version", got, pinned)
			}
			other := run(t, l, mutateReq(s, path, "inv-y", pinned, "CREATE", bitmap, "idx_cat"), enginetest.Options{})
			committed(t, other)
			checkIndex(t, l, s, path, "idx_cat", bitmap, "inv-y", pinned+1)
			if v := decide(t, sess); v.Outcome != slot.NotCommitted || !v.Fenced {
				t.Errorf("inv-x after inv-y's commit: %+v", v)
			}
		})
	}
}

// TestLanceStalePinCommitsNothing: a plain pylance commit lands before the engine starts, so the
// engine is pinned one version behind the latest. Lance would rebase its commit onto pinned+2;
// the engine's version gate (and the gateway, which serves only pinned+1's manifest) refuse it:
// COMMIT_CONFLICT observing the latest, and storage decides NOT_COMMITTED.
func TestLanceStalePinCommitsNothing(t *testing.T) {
	l := needLance(t)
	s, path := localStore(t), "events"
	pinned := newDataset(t, l, s, path, 2000)
	l.ctl(t, nil, "index", s.uri(path), "id", "BTREE", "idx_other")
	sess := run(t, l, mutateReq(s, path, "inv-stale", pinned, "CREATE", bitmap, "idx_cat"), enginetest.Options{})
	notCommitted(t, l, s, path, sess)
	if r := sess.Result; r.ObservedLatest != pinned+1 {
		t.Errorf("observed latest %d, want %d", r.ObservedLatest, pinned+1)
	}
	if got := latest(t, l, s, path); got != pinned+1 {
		t.Errorf("latest %d, want %d", got, pinned+1)
	}
}

// TestLanceDecideAfterCommit: once an invocation committed, storage names it: slot.Decide answers
// COMMITTED for it (its claim names the manifest at pinned+1, byte for byte), and for another
// invocation pinned at the same version, which never ran, NOT_COMMITTED — fenced, leaving the
// commit and Lance's reading of it as they were.
func TestLanceDecideAfterCommit(t *testing.T) {
	l := needLance(t)
	s, path := localStore(t), "events"
	pinned := newDataset(t, l, s, path, 2000)
	sess := run(t, l, mutateReq(s, path, "inv-a", pinned, "CREATE", bitmap, "idx_cat"), enginetest.Options{})
	committed(t, sess)
	v, err := slot.Decide(context.Background(), s.st, path, pinned, "inv-b", false)
	if err != nil || v.Outcome != slot.NotCommitted || !v.Fenced {
		t.Errorf("decide inv-b: %+v %v", v, err)
	}
	if v := decide(t, sess); v.Outcome != slot.Committed {
		t.Errorf("decide inv-a after inv-b's fence: %+v", v)
	}
	checkIndex(t, l, s, path, "idx_cat", bitmap, "inv-a", pinned+1)
}

// TestLanceKilledBuildLeavesOnlyRecorded: an engine killed before its commit — SIGKILLed while
// its gateway holds the second object of its IVF_PQ index in custody (the first may have landed,
// the second is in flight), or by its own crash_after_build / crash_before_commit fault once the
// index is written — leaves under the dataset only objects its gateway recorded as written (none
// elsewhere, no claim, no manifest); storage decides NOT_COMMITTED and fences it (the fence claim
// is then the one new object besides them); the latest version is unchanged; its temp files
// stayed in its private TMPDIR, removed after the reap. One killed by crash_after_commit is
// COMMITTED without an answer: the commit landed before the kill, and storage says so.
func TestLanceKilledBuildLeavesOnlyRecorded(t *testing.T) {
	l := needLance(t)
	ivf := indexCase{"IVF_PQ", "vec", map[string]string{"num_partitions": "16", "num_sub_vectors": "16"}}
	for _, tc := range []struct {
		name, fault string
		c           indexCase
		rows        int
		commits     bool
	}{
		{"sigkill_mid_write", "", ivf, 2000, false},
		{"crash_after_build", "crash_after_build", bitmap, 2000, false},
		{"crash_before_commit", "crash_before_commit", ivf, 2000, false},
		{"crash_after_commit", "crash_after_commit", bitmap, 2000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, path := localStore(t), "events"
			pinned := newDataset(t, l, s, path, tc.rows)
			before := s.objects(t, path)
			req := mutateReq(s, path, "inv-k", pinned, "CREATE", tc.c, "idx_k")
			if tc.fault != "" {
				req["fault"] = tc.fault
			}
			var (
				sess    *enginetest.Session
				started = make(chan struct{})
				writes  atomic.Int32
			)
			opt := enginetest.Options{}
			if tc.fault == "" {
				opt.OnWrite = func(string) error {
					if writes.Add(1) == 2 { // held: the engine dies with this object in flight
						<-started
						sess.Kill()
						time.Sleep(200 * time.Millisecond) // dead: its connections close with it
					}
					return nil
				}
			}
			sess, err := enginetest.Start(context.Background(), l.engine(), req, opt)
			close(started)
			if err != nil {
				t.Fatal(err)
			}
			if err := sess.Wait(); err == nil {
				t.Fatalf("the engine finished: %+v\n%s", sess.Result, sess.Stderr.String())
			}
			if ws, ok := sess.Cmd().ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("engine state %v", sess.Cmd().ProcessState)
			}
			if _, err := os.Stat(sess.TempDir); !os.IsNotExist(err) {
				t.Errorf("private temp dir still there: %v", err)
			}
			fresh := onlyThroughGateway(t, before, s.objects(t, path), sess)
			t.Logf("gateway slot %s, %d objects written (%d bytes), %d new; temp files at the kill: %v",
				sess.Gateway.Slot, len(sess.Gateway.Written), sess.Gateway.Bytes, len(fresh), sess.TempLeft)
			if tc.commits {
				committedInStorage(t, sess)
				checkIndex(t, l, s, path, "idx_k", tc.c, "inv-k", pinned+1)
				return
			}
			if tc.fault != "" && len(sess.Gateway.Written) == 0 || len(sess.Custody()) < 2 && tc.fault == "" {
				t.Errorf("the engine died before it wrote (written %v, custody %v): nothing was tested", sess.Gateway.Written, sess.Custody())
			}
			claim := slot.ClaimKey(path, pinned+1, "inv-k")
			if sess.Gateway.Slot != gateway.SlotNone || slices.Contains(fresh, claim) {
				t.Errorf("gateway slot %s, claim written %t: the engine died before its commit", sess.Gateway.Slot, slices.Contains(fresh, claim))
			}
			v := decide(t, sess)
			if v.Outcome != slot.NotCommitted || !v.Fenced {
				t.Errorf("decide: %+v, want NOT_COMMITTED and fenced", v)
			}
			if after := onlyThroughGateway(t, before, s.objects(t, path), sess); !slices.Equal(after, sortedWith(fresh, claim)) {
				t.Errorf("after the decision: %v, want %v and the fence claim", after, fresh)
			}
			if got := latest(t, l, s, path); got != pinned {
				t.Errorf("latest %d after a killed build", got)
			}
		})
	}
}

func sortedWith(keys []string, k string) []string {
	out := append(slices.Clone(keys), k)
	slices.Sort(out)
	return out
}
