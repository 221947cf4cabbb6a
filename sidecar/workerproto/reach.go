package workerproto

import (
	"net"
	"path/filepath"
	"strconv"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
)

// EnvReachBound is set to "1" in a built-in worker's environment when its launch's policy
// already holds the reach of the call it will serve (Reach of that call's dataset): the worker
// contains itself at once instead of after reading its request.
const EnvReachBound = "STEWARD_WORKER_REACH_BOUND"

// Reach is what a contained worker serving one call on ds may touch, for the sidecar's launch
// and for the built-in worker's own isolation.Contain once it has read its request (the same
// function on both sides): a file:// store gets a network namespace of its own and its dataset
// folder writable; an s3:// store keeps the host's network with TCP connect to the endpoint's
// port only. A store that does not parse gets nothing (the call is refused before it runs).
func Reach(ds rpc.DatasetRef) (network bool, p isolation.Policy) {
	ps, err := ds.Store.Parse()
	if err != nil {
		return false, p
	}
	switch ps.Kind {
	case rpc.StoreFile:
		// Readable: the store (its root is opened and walked from; an S3 worker's keys reach its
		// whole bucket the same way); writable: the dataset folder and the staging dir only.
		return false, isolation.Policy{
			Read:  []string{ps.Root},
			Write: []string{filepath.Join(ps.Root, filepath.FromSlash(ds.Path)), filepath.Join(ps.Root, storage.LocalStagingDir)},
			Mount: []string{ps.Root},
		}
	case rpc.StoreS3:
		port := 80
		if ds.Store.Secure {
			port = 443
		}
		if _, portText, err := net.SplitHostPort(ps.Endpoint); err == nil {
			if n, err := strconv.Atoi(portText); err == nil {
				port = n
			}
		}
		return true, isolation.Policy{Connect: []uint16{uint16(port)}}
	}
	return false, p
}

// EngineReach is what an engine's own installation needs: readable, for each absolute path on
// its command line, the directory holding it, and that directory's parent when it is a bin/ (a
// virtualenv or a prefix: …/venv/bin/python reads …/venv/lib); executable, its command alone
// (resolved, with its ELF interpreter), so that the engine can start nothing else. The built-in
// engine (no argv) gets nothing here: its own trees are the system's.
func EngineReach(argv []string) isolation.Policy {
	var p isolation.Policy
	if len(argv) > 0 {
		p.Exec = append([]string{}, isolation.ExecClosure(argv[0])...)
	}
	for _, a := range argv {
		if !filepath.IsAbs(a) {
			continue
		}
		d := filepath.Dir(filepath.Clean(a))
		if filepath.Base(d) == "bin" {
			d = filepath.Dir(d)
		}
		if d != "/" {
			p.Read = append(p.Read, d)
		}
	}
	return p
}
