package boltfile_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/boltfile"
	"github.com/cba1309c/steward/internal/boltfile/boltfiletest"
	bolt "go.etcd.io/bbolt"
)

var buckets = [][]byte{[]byte("a"), []byte("b")}

func initBuckets(tx *bolt.Tx) error {
	for _, b := range buckets {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	return nil
}

// fill writes n records of 200 bytes into both buckets: enough pages to damage one in the middle.
func fill(t *testing.T, path string, n int) {
	t.Helper()
	db, err := boltfile.Open(path, 0o600, &bolt.Options{Timeout: time.Second}, initBuckets)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		for i := range n {
			for _, b := range buckets {
				if err := tx.Bucket(b).Put(fmt.Appendf(nil, "key-%06d", i), make([]byte, 200)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, path string) {
	t.Helper()
	var ce *boltfile.CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, boltfile.ErrCorrupt) || ce.Path != path {
		t.Fatalf("want a *CorruptError naming %s, got %v", path, err)
	}
}

func TestOpenCreatesWithInit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	db, err := boltfile.Open(path, 0o600, nil, initBuckets)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		for _, b := range buckets {
			if tx.Bucket(b) == nil {
				return fmt.Errorf("bucket %s missing", b)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(path + ".new-*")
	if len(left) > 0 {
		t.Fatalf("creation left %v", left)
	}
	if _, err := boltfile.Open(filepath.Join(t.TempDir(), "absent.db"), 0, &bolt.Options{ReadOnly: true}, nil); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open of an absent file: %v", err)
	}
}

// Every damage is a *CorruptError naming the file, from Open, Check and Snapshot alike, and
// never a panic or a fresh empty database; Quarantine moves it aside with an audit record, after
// which Open starts a new file.
func TestDamagedFiles(t *testing.T) {
	for _, d := range boltfiletest.Damages() {
		t.Run(d.Name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.db")
			fill(t, path, 400)
			d.Apply(t, path)
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = boltfile.Open(path, 0o600, &bolt.Options{Timeout: time.Second}, initBuckets)
			wantCorrupt(t, err, path)
			t.Log(err)
			wantCorrupt(t, boltfile.Check(path, time.Second), path)
			_, err = boltfile.Snapshot(path)
			wantCorrupt(t, err, path)
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Fatal("refusing the file changed it")
			}

			at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
			moved, err := boltfile.Quarantine(boltfile.Audit{By: "ops", Reason: "test", At: at}, path, path+".absent")
			if err != nil {
				t.Fatal(err)
			}
			if len(moved) != 1 || moved[0].From != path || moved[0].To != path+".corrupt-20250304T050607Z" || moved[0].Problem == "" {
				t.Fatalf("moved %+v", moved)
			}
			if kept, _ := os.ReadFile(moved[0].To); string(kept) != string(before) {
				t.Fatal("the quarantined file is not the damaged one")
			}
			var note struct{ By, Reason, From, To, Problem string }
			if b, err := os.ReadFile(moved[0].Note); err != nil || json.Unmarshal(b, &note) != nil || note.By != "ops" || note.Reason != "test" || note.To != moved[0].To {
				t.Fatalf("audit record %s: %+v (%v)", moved[0].Note, note, err)
			}
			db, err := boltfile.Open(path, 0o600, nil, initBuckets)
			if err != nil {
				t.Fatalf("open after quarantine: %v", err)
			}
			db.Close()
		})
	}
}

func TestQuarantineRefuses(t *testing.T) {
	dir := t.TempDir()
	sound, other := filepath.Join(dir, "sound.db"), filepath.Join(dir, "other.db")
	fill(t, sound, 10)
	fill(t, other, 10)
	audit := boltfile.Audit{By: "ops", Reason: "test", At: time.Now()}
	if _, err := boltfile.Quarantine(audit, sound, other); !errors.Is(err, boltfile.ErrNotCorrupt) {
		t.Fatalf("sound files: %v, want ErrNotCorrupt", err)
	}
	if _, err := boltfile.Quarantine(boltfile.Audit{At: time.Now()}, sound); !errors.Is(err, boltfile.ErrAuditRequired) {
		t.Fatalf("no audit: %v", err)
	}
	boltfiletest.Damages()[1].Apply(t, other)
	db, err := bolt.Open(sound, 0o600, nil) // a process still has one of the pair open
	if err != nil {
		t.Fatal(err)
	}
	if _, err := boltfile.Quarantine(audit, sound, other); !errors.Is(err, boltfile.ErrInUse) {
		t.Fatalf("file in use: %v, want ErrInUse", err)
	}
	db.Close()
	moved, err := boltfile.Quarantine(audit, sound, other)
	if err != nil || len(moved) != 2 || moved[0].Problem != "" || moved[1].Problem == "" {
		t.Fatalf("the pair moves together: %+v, %v", moved, err)
	}
}

// A snapshot taken while a writer holds the file and commits back to back is always a whole
// commit: the two counters one transaction writes are equal in every snapshot. (NoSync only
// skips fsync; readers see the writes in the same order. Without the meta-page comparison this
// test sees torn snapshots within a few runs.)
func TestSnapshotWhileWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	fill(t, path, 200)
	db, err := boltfile.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoSync: true}, initBuckets)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var stop atomic.Bool
	var commits atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := uint64(1); !stop.Load(); n++ {
			err := db.Update(func(tx *bolt.Tx) error {
				v := binary.BigEndian.AppendUint64(nil, n)
				for _, b := range buckets {
					// Rewrite a spread of records too, so commits move many pages.
					if err := tx.Bucket(b).Put(fmt.Appendf(nil, "key-%06d", n%200), make([]byte, 200+n%50)); err != nil {
						return err
					}
					if err := tx.Bucket(b).Put([]byte("counter"), v); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Error(err)
				return
			}
			commits.Store(n)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	if _, err := bolt.Open(path, 0, &bolt.Options{ReadOnly: true, Timeout: 50 * time.Millisecond}); err == nil {
		t.Fatal("a read-only open got past the writer's lock: the test proves nothing")
	}
	seen := map[string]bool{}
	for range 30 {
		for c := commits.Load(); commits.Load() == c; {
			time.Sleep(time.Millisecond) // a commit between any two snapshots
		}
		snap, err := boltfile.Snapshot(path)
		if errors.Is(err, boltfile.ErrBusy) {
			seen["busy"] = true
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		err = snap.View(func(tx *bolt.Tx) error {
			a, b := tx.Bucket(buckets[0]).Get([]byte("counter")), tx.Bucket(buckets[1]).Get([]byte("counter"))
			if string(a) != string(b) {
				return fmt.Errorf("torn snapshot: counters %x and %x", a, b)
			}
			seen[string(a)] = true
			return nil
		})
		snap.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(seen) < 2 {
		t.Fatalf("snapshots saw %d states; want them to follow the writer", len(seen))
	}
	left, _ := filepath.Glob(filepath.Join(os.TempDir(), "steward-snapshot-*"))
	t.Logf("states seen: %d (busy: %t), snapshot files left in %s: %d", len(seen), seen["busy"], os.TempDir(), len(left))
}
