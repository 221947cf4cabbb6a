package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/boltfile/boltfiletest"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/hashicorp/go-hclog"
	bolt "go.etcd.io/bbolt"
)

// fillSlot gives slot 0 of dir a journal with tickets spanning many pages, as a sidecar that ran
// for a while leaves it.
func fillSlot(t *testing.T, dir string) (journal string) {
	t.Helper()
	journal = filepath.Join(dir, "ledger-0.db")
	l, err := ledger.Open(context.Background(), ledger.Config{Path: journal})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		keys := make([]string, 200)
		for k := range keys {
			keys[k] = fmt.Sprintf("data/part-%02d-%04d.parquet", i, k)
		}
		owner := ledger.Owner{Kind: ledger.HostTxn, ID: fmt.Sprintf("txn-%d", i)}
		if err := l.Reserve(context.Background(), owner, "file:///data", keys); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return journal
}

// A sidecar whose ledger journal is damaged refuses to start with
// an error that names the file and the way out, instead of panicking or starting empty (it used
// to do both). "steward ledger quarantine" moves the slot aside with an audit record, and then a
// real sidecar starts on a fresh slot.
func TestCorruptLedgerSlotRefused(t *testing.T) {
	testenv.NeedRoot(t) // the real sidecar started at the end
	bin := testbin.Steward(t)
	type damage struct {
		name  string
		inWAL bool // the journal's write-ahead log is damaged, not its bbolt file
		apply func(testing.TB, string)
	}
	var damages []damage
	for _, d := range boltfiletest.Damages() {
		damages = append(damages, damage{d.Name, false, d.Apply})
	}
	damages = append(damages,
		damage{"wal-header", true, func(t testing.TB, p string) { boltfiletest.FlipByte(t, p, 3) }},
		damage{"wal-truncated", true, func(t testing.TB, p string) {
			if err := os.Truncate(p, 8192); err != nil {
				t.Fatal(err)
			}
		}},
		// A record that does not decode in a sound bbolt file: Open refuses it, and the
		// quarantine must see it too (it checked only the file's structure once).
		damage{"bad-record", false, func(t testing.TB, p string) {
			db, err := bolt.Open(p, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *bolt.Tx) error {
				b := tx.Bucket([]byte("tickets"))
				var ks [][]byte
				if err := b.ForEach(func(k, _ []byte) error { ks = append(ks, bytes.Clone(k)); return nil }); err != nil {
					return err
				}
				for _, k := range ks {
					if err := b.Put(k, []byte{0xff, 0xff}); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}},
		damage{"wal-missing", false, func(t testing.TB, p string) {
			if err := os.Remove(ledger.WALPath(p)); err != nil {
				t.Fatal(err)
			}
		}})
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			journal := fillSlot(t, dir)
			bad := journal
			if d.inWAL || d.name == "wal-missing" {
				bad = ledger.WALPath(journal)
			}
			if d.inWAL {
				d.apply(t, bad)
			} else {
				d.apply(t, journal)
			}

			// In-process, for the typed error; New fails before anything else starts.
			s, err := sidecar.New(sidecar.Config{DisableIsolation: true, StateDir: dir, Logger: hclog.NewNullLogger()})
			if err == nil {
				s.Close()
				t.Fatal("a sidecar started on a damaged ledger slot")
			}
			var ce *ledger.CorruptError
			if !errors.As(err, &ce) || ce.Path != bad || !errors.Is(err, ledger.ErrCorrupt) {
				t.Fatalf("want a *ledger.CorruptError naming %s, got %v", bad, err)
			}
			if !strings.Contains(err.Error(), "steward ledger quarantine --state-dir "+dir) {
				t.Fatalf("the error does not say the way out: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "ledger-1.db")); err == nil {
				t.Fatal("the sidecar moved on to another slot instead of refusing")
			}

			quarantine := func(args ...string) (string, error) {
				out, err := exec.Command(bin, append([]string{"ledger", "quarantine", "--state-dir", dir}, args...)...).CombinedOutput()
				return string(out), err
			}
			if out, err := quarantine("--by", "ops@example"); err == nil || !strings.Contains(out, "--reason") {
				t.Fatalf("quarantine without a reason: %v\n%s", err, out)
			}
			out, err := quarantine("--by", "ops@example", "--reason", "disk replaced (OPS-9)")
			if err != nil {
				t.Fatalf("quarantine: %v\n%s", err, out)
			}
			moved := []string{journal, ledger.WALPath(journal)} // the slot's two files move together
			if d.name == "wal-missing" {
				moved = moved[:1]
			}
			for _, f := range moved {
				if !strings.Contains(out, "quarantined "+f+" as "+f+".corrupt-") {
					t.Fatalf("quarantine did not report moving %s:\n%s", f, out)
				}
				notes, _ := filepath.Glob(f + ".corrupt-*.audit.json")
				if len(notes) != 1 {
					t.Fatalf("audit records of %s: %v", f, notes)
				}
				if b, _ := os.ReadFile(notes[0]); !strings.Contains(string(b), "disk replaced (OPS-9)") || !strings.Contains(string(b), "ops@example") {
					t.Fatalf("audit record %s:\n%s", notes[0], b)
				}
			}
			t.Logf("quarantine:\n%s", out)

			sc := testsidecar.Start(t, testsidecar.Options{Args: []string{"--state-dir", dir}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var st rpc.ObjectsStatusResult
			err = sc.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st)
			sc.Close()
			if err != nil || st.Ledger.Used != 0 {
				t.Fatalf("fresh slot: %+v, %v", st, err)
			}
			if out, err := quarantine("--by", "ops", "--reason", "again"); err == nil || !strings.Contains(out, "no corrupt ledger slot") {
				t.Fatalf("a sound slot was quarantined: %v\n%s", err, out)
			}
		})
	}
}

// A damaged invocation-records file left by an older sidecar is no longer read (records are notes
// inside the journal now): it never stops a start.
func TestLegacyRecordsFileIgnored(t *testing.T) {
	dir := t.TempDir()
	journal := fillSlot(t, dir)
	if err := os.WriteFile(journal+".invocations", []byte("not a bbolt file"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := sidecar.New(sidecar.Config{DisableIsolation: true, DisableParentWatch: true, StateDir: dir, Logger: hclog.NewNullLogger()})
	if err != nil {
		t.Fatalf("a damaged legacy records file stopped the start: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
