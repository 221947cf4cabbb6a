package dispatch

import (
	"slices"
	"sync"
	"testing"
)

// sendFaultStore injects one fault around the next Update that journals a send (a Put of a
// RUNNING record whose last event is the dispatch): what an etcd journal does when a member is
// killed mid-request, or what another node does while this host is SIGSTOPped.
type sendFaultStore struct {
	Store
	mu       sync.Mutex
	fault    string // the armed fault ("" = none)
	failView bool   // the next View fails
	failNext bool   // the next Update fails (and does not land)
}

const (
	faultRefused    = "refused"     // the journaling commit fails and does not land
	faultCommitLost = "commit-lost" // it lands, and its answer is lost: the caller sees an error
	faultReadFails  = "read-fails"  // it lands; the recheck's read fails
	faultChanged    = "changed"     // it lands; another node's deadline sweep turns it UNKNOWN first
)

func (s *sendFaultStore) arm(fault string) {
	s.mu.Lock()
	s.fault = fault
	s.mu.Unlock()
}

func (s *sendFaultStore) View(fn func(Tx) error) error {
	s.mu.Lock()
	fail := s.failView
	s.failView = false
	s.mu.Unlock()
	if fail {
		return errTransient
	}
	return s.Store.View(fn)
}

func (s *sendFaultStore) Update(fn func(Tx) error) error {
	s.mu.Lock()
	fault, fail := s.fault, s.failNext
	s.failNext = false
	s.mu.Unlock()
	if fail {
		return errTransient
	}
	var sent string
	err := s.Store.Update(func(tx Tx) error {
		sent = ""
		if err := fn(&putSpy{Tx: tx, put: func(j *Job) {
			if j.State == StateRunning && len(j.History) > 0 && j.History[len(j.History)-1].Event == EventDispatch {
				sent = j.ID
			}
		}}); err != nil {
			return err
		}
		if sent != "" && fault == faultRefused {
			return errTransient
		}
		return nil
	})
	if sent == "" || fault == "" {
		return err
	}
	s.arm("")
	switch fault {
	case faultCommitLost:
		s.mu.Lock()
		s.failNext = true // the store is still failing: the unsent record waits for the next round
		s.mu.Unlock()
		return errTransient
	case faultReadFails:
		s.mu.Lock()
		s.failView = true
		s.mu.Unlock()
	case faultChanged:
		return s.Store.Update(func(tx Tx) error {
			j, err := tx.Get(sent)
			if err != nil {
				return err
			}
			j.State = StateUnknown
			j.record(j.Updated, EventDeadline, StateRunning, "another node's deadline sweep (test)")
			return tx.Put(&j)
		})
	}
	return err
}

type putSpy struct {
	Tx
	put func(*Job)
}

func (p *putSpy) Put(j *Job) error {
	p.put(j)
	return p.Tx.Put(j)
}

// TestJournaledButNeverSent: a dispatcher that journals RUNNING and then does not send (the
// journaling commit's answer lost, the recheck's read failing, or the job changed by another node
// before the recheck) knows that no worker exists for that invocation: it journals the job
// NOT_COMMITTED with its slot released, while the sidecar lives on, and the name takes new work
// at once. Found by the failover campaign: a job with no SEND line, settled by index.resolve,
// held its slot for as long as its sidecar lived. A journaling commit that did not land leaves
// the job PENDING, and it is sent once, later.
func TestJournaledButNeverSent(t *testing.T) {
	noLeaks(t)
	sc := launchSidecar(t)
	data := newRealData(t)
	for _, tc := range []struct {
		fault string
		from  string // the history entry of the unsent record ("" = sent later instead)
	}{
		{faultCommitLost, "unsent:NOT_COMMITTED:released"},
		{faultReadFails, "unsent:NOT_COMMITTED:released"},
		{faultChanged, "unsent:NOT_COMMITTED:released"},
		{faultRefused, ""},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			e := realEnv(t, nil)
			fs := &sendFaultStore{Store: e.store}
			e.d.Close()
			cfg := e.cfg
			cfg.Store = fs
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			e.d = d
			e.d.AddSidecar("node-1", sc)
			path := randID("ds-")
			j := e.submit(createReq(data.make(path, 1), 1, "by_id", "id"))
			sends := sc.sends.Load()
			fs.arm(tc.fault)
			_, _ = e.d.Round(t.Context()) // the fault may fail the round: the store failed
			if tc.from == "" {
				j = e.waitJob(j.ID, "committed", settled)
				if j.State != StateCommitted || j.SlotHeld || sc.sends.Load()-sends != 1 {
					t.Fatalf("%s held %t after %d sends: %s", j.State, j.SlotHeld, sc.sends.Load()-sends, historyEvents(j))
				}
				return
			}
			j = e.waitJob(j.ID, "released", func(j Job) bool { return !j.SlotHeld })
			if j.State != StateNotCommitted || sc.sends.Load() != sends || !slices.Contains(splitEvents(j), tc.from) {
				t.Fatalf("%s, %d sends: %s", j.State, sc.sends.Load()-sends, historyEvents(j))
			}
			if exited(sc) {
				t.Fatal("the sidecar exited: its epoch, not the unsent record, could have freed the slot")
			}
			again := e.submit(createReq(data.ref(path), 1, "BY_ID", "id")) // the name is free
			again = e.waitJob(again.ID, "committed", settled)
			if again.State != StateCommitted || data.latest(path) != 2 || sc.sends.Load()-sends != 1 {
				t.Fatalf("the same name afterwards: %s, version %d, %d sends: %s", again.State, data.latest(path),
					sc.sends.Load()-sends, historyEvents(again))
			}
		})
	}
}
