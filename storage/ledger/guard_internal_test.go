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
