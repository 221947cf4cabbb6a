package ledger_test

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/cba1309c/steward/storage/ledger"
)

// slowReader records when its last byte was handed out.
type recordingReader struct {
	r        io.Reader
	lastByte time.Time
}

func (r *recordingReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 {
		r.lastByte = time.Now()
	}
	return n, err
}

// TestGuardReaderHoldsTheLastByteUntilDurable: the guarded body delivers its last byte only after
// the reservation is on disk, and a reservation that fails aborts the body.
func TestGuardReaderHoldsTheLastByteUntilDurable(t *testing.T) {
	ctx := context.Background()
	l, err := ledger.Open(ctx, ledger.Config{Path: t.TempDir() + "/l.db"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	owner := ledger.Owner{Kind: ledger.HostTxn, ID: "t"}
	p, err := l.ReserveAsync(ctx, owner, "s", []string{"k"})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("x"), 1<<20)
	rec := &recordingReader{r: bytes.NewReader(data)}
	var out bytes.Buffer
	if _, err := io.CopyBuffer(&out, ledger.GuardReader(rec, int64(len(data)), p), make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	durable := time.Now()
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatal("guarded body differs from the source")
	}
	if rec.lastByte.After(durable) {
		t.Fatal("the last byte left before the reservation was durable")
	}
	st, err := l.Status(ctx, owner)
	if err != nil || st.Held != 1 {
		t.Fatalf("status %+v %v: want one held ticket", st, err)
	}
	if err := l.Accept(ctx, owner, "s", nil); err != nil {
		t.Fatal(err)
	}

}
