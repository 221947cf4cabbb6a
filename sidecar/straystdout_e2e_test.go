package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/rpc"
)

// TestStrayStdoutLandsInLog: in stdio mode the protocol runs on a private duplicate of fd 1 and
// fd 1 points at stderr. Bytes written to the sidecar's fd 1 (what a library's stray print does)
// must reach the log and never the protocol stream. The test writes them from outside through
// /proc/<pid>/fd/1, which is whatever the sidecar's fd 1 is.
func TestStrayStdoutLandsInLog(t *testing.T) {
	e := newSidecar(t)
	const stray = "STRAY-PRINT-INTO-FD-1"
	for i := 0; i < 3; i++ {
		f, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", e.c.Pid()), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Looks like a frame header to a Content-Length reader; it must never reach one.
		if _, err := fmt.Fprintf(f, "Content-Length: 3\r\n\r\n%s\n", stray); err != nil {
			t.Fatal(err)
		}
		f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h, err := e.c.Hello(ctx)
		cancel()
		if err != nil || h.Epoch != e.c.Epoch() {
			t.Fatalf("hello after a stray write to fd 1: %+v %v", h, err)
		}
	}
	waitFor(t, func() bool { return strings.Contains(e.logs.String(), stray) })
	if _, err := e.c.Metrics(context.Background()); err != nil {
		t.Fatalf("metrics after stray writes: %v", err)
	}
	var st rpc.ObjectsStatusResult
	if err := e.c.Call(context.Background(), rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st); err != nil {
		t.Fatalf("objects.status after stray writes: %v", err)
	}
}
