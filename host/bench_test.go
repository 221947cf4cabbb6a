package host_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/plugin"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"github.com/sourcegraph/jsonrpc2"
)

// The baselines: the same test binary re-executed as a raw jsonrpc2 echo server (stock
// VSCodeObjectCodec, AsyncHandler), over the child's stdio and over a go-plugin broker stream.
// steward's figure divided by its baseline, measured in the same run, is the overhead.

const benchChildEnv = "STEWARD_BENCH_CHILD"

func init() {
	switch os.Getenv(benchChildEnv) {
	case "echo-stdio":
		conn := jsonrpc2.NewConn(context.Background(),
			jsonrpc2.NewBufferedStream(stdioRWC{os.Stdin, os.Stdout}, jsonrpc2.VSCodeObjectCodec{}),
			jsonrpc2.AsyncHandler(echoHandler{}))
		<-conn.DisconnectNotify()
		os.Exit(0)
	case "echo-plugin":
		plugin.Serve(func(c net.Conn) {
			conn := jsonrpc2.NewConn(context.Background(),
				jsonrpc2.NewBufferedStream(c, jsonrpc2.VSCodeObjectCodec{}), jsonrpc2.AsyncHandler(echoHandler{}))
			<-conn.DisconnectNotify()
		})
		os.Exit(0)
	}
}

type stdioRWC struct {
	io.Reader
	io.Writer
}

func (stdioRWC) Close() error { return nil }

type echoHandler struct{}

// Handle answers every call with the very hello result a real sidecar gave (passed in by the
// parent), so the comparison measures steward's machinery (admission, strict params, metrics,
// bounded framing), not a difference in payload.
func (echoHandler) Handle(ctx context.Context, c *jsonrpc2.Conn, req *jsonrpc2.Request) {
	var p rpc.HelloParams
	if req.Params != nil {
		_ = json.Unmarshal(*req.Params, &p)
	}
	_ = c.Reply(ctx, req.ID, baselineHello)
}

// baselineHello is parsed once, when the echo child starts.
var baselineHello = func() (res rpc.HelloResult) {
	_ = json.Unmarshal([]byte(os.Getenv(benchHelloEnv)), &res)
	return res
}()

const benchHelloEnv = "STEWARD_BENCH_HELLO"

// realHello returns the JSON of a real sidecar's hello result, for the baselines to answer with.
func realHello(b *testing.B) string {
	c, err := host.LaunchStdio(context.Background(), host.Config{Path: testbin.Steward(b), Logger: hclog.NewNullLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	out, _ := json.Marshal(c.Info())
	return string(out)
}

// helloParams is what a steward host sends; the echo baseline sends and gets back the same bytes.
var helloParams = rpc.HelloParams{ProtocolVersion: rpc.ProtocolVersion, Client: "bench"}

func rawStdioEcho(b *testing.B) (call func(context.Context) error, stop func()) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchChildEnv+"=echo-stdio", benchHelloEnv+"="+realHello(b))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	conn := jsonrpc2.NewConn(context.Background(),
		jsonrpc2.NewBufferedStream(struct {
			io.Reader
			io.WriteCloser
		}{out, in}, jsonrpc2.VSCodeObjectCodec{}), nil)
	return func(ctx context.Context) error {
			var res rpc.HelloResult
			return conn.Call(ctx, "echo", helloParams, &res)
		}, func() {
			conn.Close()
			cmd.Wait()
		}
}

func rawPluginEcho(b *testing.B) (call func(context.Context) error, stop func()) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchChildEnv+"=echo-plugin", benchHelloEnv+"="+realHello(b))
	pc := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: plugin.Handshake, Plugins: plugin.PluginMap(), Cmd: cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolNetRPC}, AutoMTLS: true, Logger: hclog.NewNullLogger(),
	})
	proto, err := pc.Client()
	if err != nil {
		b.Fatal(err)
	}
	stream, err := plugin.DialStream(proto)
	if err != nil {
		b.Fatal(err)
	}
	conn := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewBufferedStream(stream, jsonrpc2.VSCodeObjectCodec{}), nil)
	return func(ctx context.Context) error {
			var res rpc.HelloResult
			return conn.Call(ctx, "echo", helloParams, &res)
		}, func() {
			conn.Close()
			pc.Kill()
		}
}

func stewardHello(launch func(context.Context, host.Config) (*host.Client, error)) func(b *testing.B) (func(context.Context) error, func()) {
	return func(b *testing.B) (func(context.Context) error, func()) {
		c, err := launch(context.Background(), host.Config{Path: testbin.Steward(b), Logger: hclog.NewNullLogger()})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context) error {
			var res rpc.HelloResult
			return c.Call(ctx, rpc.MethodHello, helloParams, &res)
		}, func() { c.Close() }
	}
}

// BenchmarkRoundTrip: steward hello vs raw jsonrpc2 echo, per transport, 1 and 64 calls in flight.
func BenchmarkRoundTrip(b *testing.B) {
	cases := []struct {
		name  string
		setup func(*testing.B) (func(context.Context) error, func())
	}{
		{"stdio/raw-echo", rawStdioEcho},
		{"stdio/steward-hello", stewardHello(host.LaunchStdio)},
		{"plugin/raw-echo", rawPluginEcho},
		{"plugin/steward-hello", stewardHello(host.Launch)},
	}
	for _, tc := range cases {
		for _, inFlight := range []int{1, 64} {
			b.Run(tc.name+"/inflight="+itoa(inFlight), func(b *testing.B) {
				call, stop := tc.setup(b)
				defer stop()
				ctx := context.Background()
				if err := call(ctx); err != nil { // warm up: connection and first allocation
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				if inFlight == 1 {
					for i := 0; i < b.N; i++ {
						if err := call(ctx); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism((inFlight + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := call(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

func itoa(n int) string {
	if n == 1 {
		return "1"
	}
	return "64"
}
