package dispatch

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// stages records the $/progress stages a real sidecar sent, by invocation.
type stages struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *stages) wait(t *testing.T, inv, stage string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.mu.Lock()
		ok := s.seen[inv+"\x00"+stage]
		s.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("invocation %s never reached %s", inv, stage)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holdingSidecar is a real sidecar whose hold faults the test can see arrive.
func holdingSidecar(t *testing.T) (*counted, *stages) {
	st := &stages{seen: map[string]bool{}}
	sc := testsidecar.Start(t, testsidecar.Options{OnNotify: func(method string, params json.RawMessage) {
		var p rpc.ProgressParams
		if method == rpc.NotifyProgress && json.Unmarshal(params, &p) == nil {
			st.mu.Lock()
			st.seen[p.InvocationID+"\x00"+p.Stage] = true
			st.mu.Unlock()
		}
	}})
	return &counted{Client: sc.Client}, st
}

func mustNew(t *testing.T, s Store) *Dispatcher {
	t.Helper()
	d, err := New(Config{Store: s, ExecuteDeadline: 20 * time.Second, AnswerGrace: 5 * time.Second, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func mustRound(t *testing.T, d *Dispatcher) RoundStats {
	t.Helper()
	st, err := d.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// settledJob runs rounds of d until job id is settled and its cancel's reply (if any) journaled.
func settledJob(t *testing.T, d *Dispatcher, id string) Job {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mustRound(t, d)
		j, err := d.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State.Settled() && !j.SlotHeld && (j.Cancel == nil || j.Cancel.Reply != nil || j.Result == nil && j.InvocationID == "") {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not settled: %s slot %t cancel %+v", id, j.State, j.SlotHeld, j.Cancel)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCancelThroughDispatcher cancels jobs through the dispatcher on bbolt and on a shared etcd
// journal, against a real sidecar: before the send (never sent), running before its commit,
// held after its commit, and after the dispatcher that sent it restarted. On etcd a second node,
// which holds no sidecar, journals the cancels; on bbolt they are journaled by RequestCancel on
// the store, as `steward jobs cancel` does.
func TestCancelThroughDispatcher(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			store, open := b.open(t)
			sc, seen := holdingSidecar(t)
			data := newRealData(t)
			a := mustNew(t, store)
			if err := a.AddSidecar("node-a", sc); err != nil {
				t.Fatal(err)
			}
			// cancelElsewhere journals a cancel from another place than a's own API.
			cancelElsewhere := func(id string) Job {
				t.Helper()
				var j Job
				var err error
				if b.name == "etcd" {
					j, err = mustNew(t, open()).Cancel(context.Background(), id)
				} else {
					j, err = RequestCancel(store, id, "cli", "test", time.Now())
				}
				if err != nil {
					t.Fatal(err)
				}
				return j
			}
			ctx := context.Background()
			submit := func(path, fault string) Job {
				t.Helper()
				r := createReq(data.make(path, 1), 1, "by_name", "name")
				r.Fault = fault
				j, err := a.Submit(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				return j
			}
			sent := func(id string) Job {
				t.Helper()
				mustRound(t, a)
				j, err := a.Get(id)
				if err != nil || j.State != StateRunning {
					t.Fatalf("not sent: %+v %v", j, err)
				}
				return j
			}

			// Before the send: settled at once, never sent, by any node.
			j := submit("before", "")
			j = cancelElsewhere(j.ID)
			if j.State != StateNotCommitted || j.SlotHeld || j.Cancel == nil {
				t.Fatalf("cancelled PENDING job: %+v", j)
			}
			mustRound(t, a)
			if n := sc.sends.Load(); n != 0 {
				t.Fatalf("a cancelled PENDING job was sent (%d sends)", n)
			}
			if got := historyEvents(mustGet(t, a, j.ID)); got != "submit:PENDING:held cancel:NOT_COMMITTED:released" {
				t.Fatalf("history %s", got)
			}

			// Running, held before its commit: killed and fenced, NOT_COMMITTED -9.
			j = sent(submit("running", workerproto.FaultHoldBeforeCommit).ID)
			seen.wait(t, j.InvocationID, workerproto.HoldStage(workerproto.FaultHoldBeforeCommit))
			cancelElsewhere(j.ID)
			j = settledJob(t, a, j.ID)
			if j.State != StateNotCommitted || j.Result == nil || j.Result.Code != rpc.ReasonCancelled || !j.Result.Cancelled ||
				j.Cancel.Reply == nil || j.Cancel.Reply.State != rpc.CancelCancelled || j.Cancel.Reply.Outcome != rpc.OutcomeNotCommitted {
				t.Fatalf("running job after cancel: %+v result %+v cancel %+v", j, j.Result, j.Cancel)
			}
			if v := data.latest("running"); v != 1 {
				t.Fatalf("latest %d", v)
			}
			t.Logf("running: %s result %s %d %q", historyEvents(j), j.Result.Phase, j.Result.Code, j.Result.Message)

			// Held after its commit, cancelled through a's own API: the commit stands.
			j = sent(submit("landed", workerproto.FaultHoldAfterCommit).ID)
			seen.wait(t, j.InvocationID, workerproto.HoldStage(workerproto.FaultHoldAfterCommit))
			if _, err := a.Cancel(ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			j = settledJob(t, a, j.ID)
			if j.State != StateCommitted || j.Result.Code != rpc.NativeOK || j.Result.CommittedVersion != 2 || !j.Result.Cancelled ||
				j.Cancel.Reply == nil || j.Cancel.Reply.Outcome != rpc.OutcomeCommitted {
				t.Fatalf("landed job after cancel: %+v result %+v cancel %+v", j, j.Result, j.Cancel)
			}

			// The dispatcher that sent it restarts (its call abandoned, the sidecar runs on): the
			// next one honours the journaled cancel at the sidecar, and the reply settles the job.
			j = sent(submit("restart", workerproto.FaultHoldBeforeCommit).ID)
			seen.wait(t, j.InvocationID, workerproto.HoldStage(workerproto.FaultHoldBeforeCommit))
			a.Close()
			cancelElsewhere(j.ID)
			a2 := mustNew(t, store)
			if err := a2.AddSidecar("node-a", sc); err != nil {
				t.Fatal(err)
			}
			j = settledJob(t, a2, j.ID)
			if j.State != StateNotCommitted || j.Cancel.Reply == nil || j.Cancel.Reply.State != rpc.CancelCancelled || j.Result != nil {
				t.Fatalf("restarted dispatcher's cancel: %+v cancel %+v", j, j.Cancel)
			}
			if n := sc.sends.Load(); n != 3 {
				t.Fatalf("%d sends, want 3 (one per sent job)", n)
			}
		})
	}
}

func mustGet(t *testing.T, d *Dispatcher, id string) Job {
	t.Helper()
	j, err := d.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}
