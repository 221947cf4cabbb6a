package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/boltfile/boltfiletest"
	bolt "go.etcd.io/bbolt"
)

// crash stops l as a SIGKILL would leave its files: the committer writes what is queued (to the
// log, as any commit) and both files are closed without the checkpoint of a clean Close.
func crash(t *testing.T, l *Ledger) {
	t.Helper()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.stop()
	l.wg.Wait()
	j := l.j
	close(j.stop)
	<-j.done
	if j.wal != nil {
		j.wal.close()
	}
	if err := j.db.Close(); err != nil {
		t.Fatal(err)
	}
}

func openAt(t *testing.T, path string) *Ledger {
	t.Helper()
	l, err := Open(context.Background(), Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func reserveEach(t *testing.T, l *Ledger, owners ...string) {
	t.Helper()
	for _, o := range owners {
		if err := l.Reserve(context.Background(), Owner{Kind: Invocation, ID: o}, "m", []string{"k/" + o}); err != nil {
			t.Fatal(err)
		}
	}
}

// holds reports which of owners hold their ticket in l.
func holds(t *testing.T, l *Ledger, owners ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, o := range owners {
		tk, err := l.Tickets(context.Background(), Owner{Kind: Invocation, ID: o})
		if err != nil {
			t.Fatal(err)
		}
		out[o] = len(tk) == 1 && tk[0].Key == "k/"+o
	}
	return out
}

// boltTickets counts the tickets the bbolt file itself holds (without the log).
func boltTickets(t *testing.T, path string) (n int, done uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(bucketTickets).Stats().KeyN
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	done, _, err = walDone(db)
	if err != nil {
		t.Fatal(err)
	}
	return n, done
}

// Reservations acknowledged before a crash are only in the log (the bbolt file has none of
// them), and the next Open replays them, absorbs them in a checkpoint and starts a new generation.
func TestWALReplaysAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	l := openAt(t, path)
	reserveEach(t, l, "a", "b", "c")
	if err := l.Accept(context.Background(), Owner{Kind: Invocation, ID: "b"}, "m", nil); err != nil {
		t.Fatal(err)
	}
	crash(t, l)
	if n, done := boltTickets(t, path); n != 0 || done != 1 {
		t.Fatalf("the bbolt file holds %d tickets, generation %d absorbed: want 0 and 1 (the reservations only in the log)", n, done)
	}
	l2 := openAt(t, path)
	if got := holds(t, l2, "a", "b", "c"); !got["a"] || got["b"] || !got["c"] {
		t.Fatalf("after the crash: %v, want a and c held, b accepted", got)
	}
	if l2.j.wal.gen != 3 {
		t.Fatalf("log generation %d after the replay, want 3", l2.j.wal.gen)
	}
	if err := l2.Close(); err != nil {
		t.Fatal(err)
	}
	if n, done := boltTickets(t, path); n != 2 || done != 2 {
		t.Fatalf("the bbolt file holds %d tickets, generation %d absorbed: want 2 and 2", n, done)
	}
	l3 := openAt(t, path)
	defer l3.Close()
	if got := holds(t, l3, "a", "c"); !got["a"] || !got["c"] {
		t.Fatalf("after a clean close: %v", got)
	}
}

// A torn last record (a write the crash interrupted, never acknowledged) is the end of the log:
// the records before it are replayed, it is not.
func TestWALTornTailIsTheEnd(t *testing.T) {
	for _, where := range []struct {
		name string
		off  int64
	}{{"payload", 2*walPage + recHeader + 3}, {"header", 2*walPage + 5}, {"crc", 2*walPage + 21}} {
		t.Run(where.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "l.db")
			l := openAt(t, path)
			reserveEach(t, l, "a", "b")
			crash(t, l)
			boltfiletest.FlipByte(t, walPath(path), where.off)
			l2 := openAt(t, path)
			defer l2.Close()
			if got := holds(t, l2, "a", "b"); !got["a"] || got["b"] {
				t.Fatalf("%v, want a only", got)
			}
		})
	}
}

// A damaged record with a sound one after it is acknowledged custody lost: Open refuses the log
// as corrupt, naming it, and changes neither file.
func TestWALDamagedRecordRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	l := openAt(t, path)
	reserveEach(t, l, "a", "b", "c")
	crash(t, l)
	boltfiletest.FlipByte(t, walPath(path), 2*walPage+recHeader)
	refused(t, path, "record 2 unreadable, record 3 after it is sound")
}

// refused opens path, wants a *CorruptError naming its log whose text has want, and checks
// that neither file changed.
func refused(t *testing.T, path, want string) {
	t.Helper()
	before := [2][]byte{read(t, path), read(t, walPath(path))}
	l, err := Open(context.Background(), Config{Path: path})
	if err == nil {
		l.Close()
		t.Fatal("opened")
	}
	var ce *CorruptError
	if !errors.As(err, &ce) || ce.Path != walPath(path) || !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("want a *CorruptError naming %s with %q, got %v", walPath(path), want, err)
	}
	t.Log(err)
	if after := [2][]byte{read(t, path), read(t, walPath(path))}; !bytes.Equal(after[0], before[0]) || !bytes.Equal(after[1], before[1]) {
		t.Fatal("refusing the journal changed a file")
	}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return b
}

// A journal that has had a log is refused without it, or with a log that is not its own, or
// damaged: never taken for an empty log.
func TestWALMissingOrForeignRefused(t *testing.T) {
	session := func(t *testing.T, path, owner string) {
		l := openAt(t, path)
		reserveEach(t, l, owner)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("missing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "l.db")
		session(t, path, "a")
		if err := os.Remove(walPath(path)); err != nil {
			t.Fatal(err)
		}
		refused(t, path, "write-ahead log missing")
	})
	t.Run("header", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "l.db")
		session(t, path, "a")
		boltfiletest.FlipByte(t, walPath(path), 9)
		refused(t, path, "header damaged")
	})
	t.Run("truncated", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "l.db")
		session(t, path, "a")
		if err := os.Truncate(walPath(path), walPage); err != nil {
			t.Fatal(err)
		}
		refused(t, path, "write-ahead log of 4096 bytes")
	})
	t.Run("older", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "l.db")
		session(t, path, "a")
		old := read(t, walPath(path))
		session(t, path, "b")
		session(t, path, "c")
		if err := os.WriteFile(walPath(path), old, 0o600); err != nil {
			t.Fatal(err)
		}
		refused(t, path, "does not belong")
	})
}

// A crash between a checkpoint's transaction and the log's reset leaves a log whose generation
// the bbolt file has absorbed: its records are not applied again (they are in the file) and the
// next generation starts.
func TestWALCheckpointedBeforeReset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	l := openAt(t, path)
	reserveEach(t, l, "a", "b")
	if err := l.Accept(context.Background(), Owner{Kind: Invocation, ID: "a"}, "m", nil); err != nil {
		t.Fatal(err)
	}
	crash(t, l)
	// The checkpoint's transaction, as the committer would have made it.
	f, err := os.Open(walPath(path))
	if err != nil {
		t.Fatal(err)
	}
	gen, ops, err := readWAL(f)
	f.Close()
	if err != nil || gen != 2 || len(ops) != 3 {
		t.Fatalf("log: generation %d, %d changes, %v", gen, len(ops), err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{db: db, wal: &wal{gen: gen}, pending: ops}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := apply(tx, j.pending); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(metaWALDone, []byte{0, 0, 0, 0, 0, 0, 0, byte(gen)})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	l2 := openAt(t, path)
	defer l2.Close()
	if got := holds(t, l2, "a", "b"); got["a"] || !got["b"] {
		t.Fatalf("%v, want b only", got)
	}
	if l2.j.wal.gen != 3 {
		t.Fatalf("generation %d, want 3", l2.j.wal.gen)
	}
}

// Past half a log, an idle committer checkpoints: the bbolt file catches up and the log starts
// over, with nothing lost across the change of generation.
func TestWALCheckpointsWhenHalfFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	l := openAt(t, path)
	var owners []string
	for i := range walSize/walPage/2 + 100 {
		owners = append(owners, fmt.Sprintf("o%04d", i))
	}
	reserveEach(t, l, owners...)
	crash(t, l)
	n, done := boltTickets(t, path)
	if done < 2 || n < walSize/walPage/2 {
		t.Fatalf("bbolt file: %d tickets, generation %d absorbed: no checkpoint at half a log", n, done)
	}
	l2 := openAt(t, path)
	defer l2.Close()
	for o, ok := range holds(t, l2, owners...) {
		if !ok {
			t.Fatalf("%s lost across the checkpoint", o)
		}
	}
}

// A commit larger than the log goes to the bbolt file in a checkpoint, with what the log held.
func TestWALOversizedCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	l := openAt(t, path)
	reserveEach(t, l, "first")
	ks := make([]string, 24000)
	for i := range ks {
		ks[i] = fmt.Sprintf("big/%s-%06d", strings.Repeat("x", 200), i)
	}
	if err := l.Reserve(context.Background(), Owner{Kind: Invocation, ID: "big"}, "m", ks); err != nil {
		t.Fatal(err)
	}
	crash(t, l)
	if n, done := boltTickets(t, path); n != len(ks)+1 || done != 2 {
		t.Fatalf("bbolt file: %d tickets, generation %d: want %d and 2", n, done, len(ks)+1)
	}
	l2 := openAt(t, path)
	defer l2.Close()
	tk, err := l2.Tickets(context.Background(), Owner{Kind: Invocation, ID: "big"})
	if err != nil || len(tk) != len(ks) || !holds(t, l2, "first")["first"] {
		t.Fatalf("%d of %d tickets, %v", len(tk), len(ks), err)
	}
}

func FuzzDecodeWALOps(f *testing.F) {
	seed, _ := encodeOps([]jop{{bucket: bucketTickets, key: []byte("k"), val: []byte("v")}, {bucket: bucketNotes, key: []byte{1}}, {bucket: bucketTransfers, key: []byte("p"), val: []byte{}}})
	f.Add(seed)
	f.Add([]byte{3, 1, 'k', 0})
	f.Add([]byte{0, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := decodeOps(b)
		if err != nil {
			return
		}
		enc, err := encodeOps(ops)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeOps(enc)
		if err != nil || len(again) != len(ops) {
			t.Fatalf("round trip of %x: %v", b, err)
		}
		for i := range ops {
			a, o := again[i], ops[i]
			if string(a.bucket) != string(o.bucket) || !bytes.Equal(a.key, o.key) || !bytes.Equal(a.val, o.val) || (a.val == nil) != (o.val == nil) {
				t.Fatalf("change %d: %+v vs %+v", i, a, o)
			}
		}
	})
}

// Problems finds in copies what Open refuses, file by file, and nothing in a sound slot; a
// ticket record that does not decode is the journal's problem too (a bbolt file can be sound
// and still hold one: Open refuses it, so the quarantine must be able to move it).
func TestProblems(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "l.db")
	l := openAt(t, path)
	reserveEach(t, l, "a")
	crash(t, l)
	copyTo := func(src string) string {
		dst := filepath.Join(t.TempDir(), "copy")
		if err := os.WriteFile(dst, read(t, src), 0o600); err != nil {
			t.Fatal(err)
		}
		return dst
	}
	jp, lp, err := Problems(copyTo(path), copyTo(walPath(path)))
	if err != nil || jp != "" || lp != "" {
		t.Fatalf("sound slot: %q, %q, %v", jp, lp, err)
	}
	for _, c := range []struct {
		name, journal, log string
		wantJ, wantL       string
	}{
		{"log missing", copyTo(path), "", "write-ahead log missing", ""},
		{"log without its journal", "", copyTo(walPath(path)), "", "next to a journal that never had one"},
		{"log damaged", copyTo(path), func() string { c := copyTo(walPath(path)); boltfiletest.FlipByte(t, c, 1); return c }(), "", "header damaged"},
		{"record undecodable", func() string {
			c := copyTo(path)
			db, err := bolt.Open(c, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(bucketTickets).Put(ticketKey("m", "k/x"), []byte{0xff, 0xff})
			}); err != nil {
				t.Fatal(err)
			}
			return c
		}(), copyTo(walPath(path)), "ticket", ""},
	} {
		jp, lp, err := Problems(c.journal, c.log)
		if err != nil || !strings.Contains(jp, c.wantJ) || !strings.Contains(lp, c.wantL) || (c.wantJ == "") != (jp == "") || (c.wantL == "") != (lp == "") {
			t.Errorf("%s: %q, %q, %v", c.name, jp, lp, err)
		}
	}
}
