package ledger

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// A reservation that was rolled back aborts the guarded body before its last byte.
func TestGuardAbortsOnFailedReservation(t *testing.T) {
	journalErr := errors.New("journal write failed")
	p := &Pending{ready: make(chan struct{}), err: journalErr}
	close(p.ready)
	data := bytes.Repeat([]byte("y"), 10000)
	var out bytes.Buffer
	_, err := io.CopyBuffer(&out, GuardReader(bytes.NewReader(data), int64(len(data)), p), make([]byte, 1024))
	if !errors.Is(err, journalErr) {
		t.Fatalf("copy error %v, want the reservation's error", err)
	}
	if out.Len() >= len(data) {
		t.Fatalf("%d of %d bytes passed: the last byte must be held back", out.Len(), len(data))
	}
}

// The random-access form guards ReadAt and keeps Seek working, as S3 clients use them.
func TestGuardRandomAccess(t *testing.T) {
	journalErr := errors.New("journal write failed")
	p := &Pending{ready: make(chan struct{}), err: journalErr}
	close(p.ready)
	data := bytes.Repeat([]byte("z"), 4096)
	g := GuardReader(bytes.NewReader(data), int64(len(data)), p)
	ra, ok := g.(io.ReaderAt)
	if !ok {
		t.Fatal("a bytes.Reader body lost io.ReaderAt behind the guard")
	}
	buf := make([]byte, 1024)
	if n, err := ra.ReadAt(buf, 0); err != nil || n != 1024 {
		t.Fatalf("ReadAt of an early range: %d, %v", n, err)
	}
	if _, err := ra.ReadAt(buf, 3072); !errors.Is(err, journalErr) {
		t.Fatalf("ReadAt of the last range: %v, want the reservation's error", err)
	}
	sk := g.(io.Seeker)
	if pos, err := sk.Seek(100, io.SeekStart); err != nil || pos != 100 {
		t.Fatalf("Seek: %d, %v", pos, err)
	}
	if _, err := io.ReadAll(g); !errors.Is(err, journalErr) {
		t.Fatalf("read after seek: %v, want the reservation's error", err)
	}
}
