package enginesdk_test

import (
	"context"
	"fmt"
	"os"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
)

// noop is the smallest engine: it builds nothing and says so.
type noop struct{}

func (noop) Mutate(context.Context, *enginesdk.Conn, *workerproto.MutateRequest) *workerproto.Result {
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeNotSupported, Message: "noop builds nothing"}
}

// An engine's main: open the pipes steward gave it, declare itself, serve one request.
func Example() {
	c, err := enginesdk.Open()
	if err != nil { // not started by a sidecar
		fmt.Println("no protocol pipes")
		return
	}
	os.Exit(enginesdk.Serve(context.Background(), c, workerproto.Engine{
		Name: "noop", IndexTypes: []string{"NOOP"}, Settle: workerproto.SettleNone}, noop{}))
}
