package enginesdk_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// echo is a tiny engine: it reserves one prefix, reports progress and answers.
type echo struct{ reserveErr error }

func (e *echo) Mutate(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest) *workerproto.Result {
	e.reserveErr = c.Reserve(ctx, nil, []string{req.Dataset.Path + "/_indices/u/"})
	c.Progress("build", 1, 1)
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeIO, Message: "key " + req.Credentials.SecretKey + " " + strings.Repeat("x", 2000)}
}

// sidecarSide plays the sidecar: it reads hello, writes the request, refuses the reservation and
// collects the frames up to the answer.
func sidecarSide(t *testing.T, toEngine io.Writer, fromEngine io.Reader, kind string, body any) []*workerproto.Frame {
	var got []*workerproto.Frame
	hello, err := workerproto.Read(fromEngine, workerproto.MaxWorkerFrame)
	if err != nil || hello.T != workerproto.TypeHello || hello.Engine.Check() != nil || hello.Pid != os.Getpid() {
		t.Fatalf("hello %+v %v", hello, err)
	}
	f, _ := workerproto.NewRequest(kind, body)
	if err := workerproto.Write(toEngine, f, workerproto.MaxRequestFrame); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := workerproto.Read(fromEngine, workerproto.MaxWorkerFrame)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
		switch f.T {
		case workerproto.TypeReserve:
			_ = workerproto.Write(toEngine, &workerproto.Frame{T: workerproto.TypeReserved, Seq: f.Seq, Error: "no"}, workerproto.MaxRequestFrame)
		case workerproto.TypeResult:
			return got
		}
	}
}

func TestServe(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	e := &echo{}
	done := make(chan int, 1)
	decl := workerproto.Engine{Name: "echo", IndexTypes: []string{"X"}, Settle: workerproto.SettleNone}
	go func() { done <- enginesdk.Serve(context.Background(), enginesdk.New(inR, outW), decl, e) }()
	req := &workerproto.MutateRequest{InvocationID: "i", Dataset: rpc.DatasetRef{Path: "ds"},
		Credentials: &rpc.Credentials{AccessKey: "AKIAEXAMPLE", SecretKey: "s3cr3t-value"}}
	frames := sidecarSide(t, inW, outR, workerproto.KindMutate, req)
	if code := <-done; code != 0 {
		t.Fatalf("exit %d", code)
	}
	if len(frames) != 3 || frames[0].T != workerproto.TypeReserve || frames[0].Prefixes[0] != "ds/_indices/u/" || frames[1].T != workerproto.TypeProgress {
		t.Fatalf("frames %+v", frames)
	}
	if !errors.Is(e.reserveErr, enginesdk.ErrRefused) {
		t.Errorf("refused reservation: %v", e.reserveErr)
	}
	msg := frames[2].Result.Message
	if strings.Contains(msg, "s3cr3t-value") || len(msg) > enginesdk.MaxMessage+len("…") {
		t.Errorf("message not redacted or bounded: %d bytes", len(msg))
	}
}

// TestServeRefusesASettleRequest: the sidecar sends no settle request any more (ENGINE.md §5);
// one is a malformed request, answered by nothing and exit code 4.
func TestServeRefusesASettleRequest(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- enginesdk.Serve(context.Background(), enginesdk.New(inR, outW),
			workerproto.Engine{Name: "echo", IndexTypes: []string{"X"}, Settle: workerproto.SettleNone}, &echo{})
		outW.Close()
	}()
	if f, err := workerproto.Read(outR, workerproto.MaxWorkerFrame); err != nil || f.T != workerproto.TypeHello {
		t.Fatalf("first frame %+v, %v: want hello", f, err)
	}
	if err := workerproto.Write(inW, &workerproto.Frame{T: workerproto.TypeRequest, Kind: "settle", Request: []byte(`{"invocation_id":"i"}`)},
		workerproto.MaxRequestFrame); err != nil {
		t.Fatal(err)
	}
	if f, err := workerproto.Read(outR, workerproto.MaxWorkerFrame); err == nil {
		t.Errorf("the engine answered a settle request: %+v", f)
	}
	if code := <-done; code != 4 {
		t.Errorf("exit code %d, want 4 (a malformed request)", code)
	}
}
