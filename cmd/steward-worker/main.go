// Command steward-worker is the worker executable a sidecar built with it embedded (the
// leanworker build tag, as `make build` and the tests build steward) starts its worker domains
// from: the built-in engine's `worker` mode and the `engine-exec` trampoline of every other
// engine, exactly as `steward worker` and `steward engine-exec` are, and nothing else. Only the
// sidecar starts it, from the worker image in its temp dir (sidecar/workerimage.go).
//
// Why a program of its own: a worker runs the package initializers of everything linked into
// its executable before it can serve, and steward links go-plugin's gRPC and protobuf, etcd's
// client, Prometheus and the rest of the host side, which a worker never uses; without them a
// worker's start takes about half the init time and heap (docs/PERFORMANCE.md §2.1).
//
// Build it with -ldflags=-R=0x200000 (the Makefile and internal/testing/testbin do): its
// segments then start on 2 MiB boundaries, so a worker maps its text and read-only data from the
// worker image's 2 MiB page-cache folios whole, a page-table entry per 2 MiB, rather than the
// head and tail of each segment 4 KiB a page, which in this small executable is most of its text
// (docs/PERFORMANCE.md §2.2).
package main

import (
	"fmt"
	"os"

	"github.com/cba1309c/steward/sidecar/worker"
)

func main() {
	if code, ok := worker.Mode(os.Args[1:]); ok {
		os.Exit(code)
	}
	usage()
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: steward-worker worker | engine-exec -- COMMAND [ARG…]\n\nonly a steward sidecar starts this program, in a worker domain")
	os.Exit(2)
}
