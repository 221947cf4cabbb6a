package enginetest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/storage/gateway"
)

// lanceBuilds are the builds of issue #12 item 8: BTREE and BITMAP on 1M rows, IVF_PQ on
// 100k x 128 float32.
var lanceBuilds = []struct {
	name      string
	c         indexCase
	rows, dim int
}{
	{"BTREE-1M", indexCase{"BTREE", "id", nil}, 1_000_000, 0},
	{"BITMAP-1M", indexCase{"BITMAP", "category", nil}, 1_000_000, 0},
	{"IVF_PQ-100k", indexCase{"IVF_PQ", "vec", map[string]string{"num_partitions": "64", "num_sub_vectors": "16"}}, 100_000, 128},
}

// BenchmarkLanceBuild: steward's Lance engine (engines/lance/engine.py under the engine harness:
// protocol v1, the dataset served through a storage gateway on loopback, the build uncommitted,
// the commit at pinned+1 tagged with the invocation and claimed by the gateway) against the same
// build in a bare pylance process straight on the store (enginetest.BareBuild: Lance builds and
// commits by itself), each on its own hard-linked copy of one cached dataset in one local store:
// issue 44 item 8's cost of the gateway, engine through gateway vs bare pylance. Every iteration
// runs engine, bare, bare, engine (bare first and last on even rounds, see enginetest.ABBA); each
// figure is a whole process, start to exit (wall, and CPU time: the engine's CPU includes the
// gateway's, this process's CPU while the engine ran, which the sidecar would spend). The engine
// leaves with os._exit after its answer, the bare process through the interpreter's teardown:
// that is part of the difference, and it is steward's to keep (the sidecar reaps the domain
// before it answers). Run with -benchtime 1x (one ABBA per round; make bench repeats rounds).
func BenchmarkLanceBuild(b *testing.B) {
	l := needLance(b)
	for _, m := range lanceBuilds {
		b.Run(m.name, func(b *testing.B) {
			src, err := enginetest.CachedLanceDataset(l.python, l.dir, m.rows, m.dim)
			if err != nil {
				b.Fatal(err)
			}
			s := localStore(b)
			var rssEngine, rssBare int64
			var cpuEngine, cpuBare, cpuGateway time.Duration
			n := 0
			fresh := func() string {
				n++
				path := fmt.Sprintf("ds-%d", n)
				if err := enginetest.LinkCopy(src, filepath.Join(s.root, path)); err != nil {
					b.Fatal(err)
				}
				return path
			}
			engine := func() (time.Duration, error) {
				path := fresh()
				self := selfCPU()
				sess := run(b, l, mutateReq(s, path, fmt.Sprintf("inv-%d", n), 1, "CREATE", m.c, "idx"), enginetest.Options{})
				gw := selfCPU() - self
				if r := sess.Result; r == nil || r.Code != 0 || r.CommittedVersion != 2 || sess.Gateway.Slot != gateway.SlotLanded {
					return 0, fmt.Errorf("engine: %+v, gateway slot %s\n%s%s", r, sess.Gateway.Slot, sess.Stderr.String(), sess.GatewayLog.String())
				}
				ps := sess.Cmd().ProcessState
				rssEngine = max(rssEngine, ps.SysUsage().(*syscall.Rusage).Maxrss<<10)
				cpuEngine += ps.UserTime() + ps.SystemTime() + gw
				cpuGateway += gw
				os.RemoveAll(filepath.Join(s.root, path))
				return sess.Wall, nil
			}
			bare := func() (time.Duration, error) {
				path := fresh()
				r, err := enginetest.BareBuild(context.Background(), l.python, l.dir, s.uri(path), m.c.column, m.c.typ, "idx", m.c.params)
				rssBare = max(rssBare, r.PeakRSS)
				cpuBare += r.CPU
				os.RemoveAll(filepath.Join(s.root, path))
				return r.Wall, err
			}
			enginetest.BenchABBA(b, "engine", "bare", engine, bare)
			// CPU time beside the wall: a build's CPU hardly moves with the machine's load, so
			// it tells steward's work from a noisy neighbour's.
			b.ReportMetric(cpuEngine.Seconds()/float64(2*b.N), "engine-cpu-s")
			b.ReportMetric(cpuBare.Seconds()/float64(2*b.N), "bare-cpu-s")
			b.ReportMetric(cpuGateway.Seconds()/float64(2*b.N), "gateway-cpu-s")
			b.ReportMetric(float64(rssEngine>>20), "engine-MiB")
			b.ReportMetric(float64(rssBare>>20), "bare-MiB")
		})
	}
}

// selfCPU is this process's user+system CPU time so far: the harness's gateway serves the engine
// from here.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
