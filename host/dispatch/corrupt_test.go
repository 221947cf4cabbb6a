package dispatch

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/boltfile/boltfiletest"
)

// fillStore leaves e's store with n PENDING jobs spread over datasets (n/32 each), closed.
func fillStore(e *env, n int) {
	e.t.Helper()
	for i := range n {
		r := fakeRequest(fmt.Sprintf("idx_%04d", i))
		r.Dataset.Path = fmt.Sprintf("ds%02d", i/32)
		e.submit(r)
	}
	e.close()
}

// A damaged store is refused with a *CorruptError naming it, for writing and for reading alike,
// instead of panicking the host (bbolt does, on the first read of a bad page) or starting empty;
// QuarantineStore moves it aside, after which OpenBolt starts an empty store.
func TestCorruptStoreRefused(t *testing.T) {
	for _, d := range boltfiletest.Damages() {
		t.Run(d.Name, func(t *testing.T) {
			e := newEnv(t, nil)
			fillStore(e, 96)
			d.Apply(t, e.path)
			before, err := os.ReadFile(e.path)
			if err != nil {
				t.Fatal(err)
			}
			for _, opts := range []BoltOptions{{}, {ReadOnly: true}, {Snapshot: true}} {
				s, err := OpenBolt(e.path, opts)
				if err == nil {
					// Before the fix the damage surfaced (as a panic) only on use.
					_, err = List(s, ListOptions{})
					s.Close()
				}
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Path != e.path || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("OpenBolt %+v: want a *CorruptError naming %s, got %v", opts, e.path, err)
				}
			}
			if after, _ := os.ReadFile(e.path); !bytes.Equal(after, before) {
				t.Fatal("refusing the store changed it")
			}

			if _, err := QuarantineStore(e.path, "ops", "", time.Now()); !errors.Is(err, ErrAuditRequired) {
				t.Fatalf("quarantine without a reason: %v", err)
			}
			q, err := QuarantineStore(e.path, "ops", "disk replaced", time.Date(2025, 6, 7, 8, 9, 10, 0, time.UTC))
			if err != nil {
				t.Fatal(err)
			}
			if q.To != e.path+".corrupt-20250607T080910Z" || q.Problem == "" {
				t.Fatalf("quarantined %+v", q)
			}
			if _, err := os.Stat(q.Note); err != nil {
				t.Fatalf("audit record: %v", err)
			}
			e.open()
			if jobs, err := e.d.List(ListOptions{}); err != nil || len(jobs) != 0 {
				t.Fatalf("fresh store: %d jobs, %v", len(jobs), err)
			}
			if _, err := QuarantineStore(e.path, "ops", "again", time.Now()); !errors.Is(err, ErrStoreLocked) {
				t.Fatalf("quarantine of a store in use: %v", err)
			}
			e.close()
			if _, err := QuarantineStore(e.path, "ops", "again", time.Now()); !errors.Is(err, ErrNotCorrupt) {
				t.Fatalf("quarantine of a sound store: %v", err)
			}
		})
	}
}
