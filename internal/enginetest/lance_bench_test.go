package enginetest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/enginetest"
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
// protocol v1, custody reservations, the build uncommitted, the claimed commit at pinned+1 tagged
// with the invocation) against the same build in a bare pylance process (enginetest.BareBuild:
// Lance builds and commits by itself), each on its own hard-linked copy of one cached dataset.
// Every iteration runs engine, bare, bare, engine (bare first and last on even rounds, see
// enginetest.ABBA); each figure is a whole process, start to exit (wall, and CPU time). The engine
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
			var cpuEngine, cpuBare time.Duration
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
				sess := run(b, l, "mutate", mutateReq(s, path, fmt.Sprintf("inv-%d", n), 1, "CREATE", m.c, "idx"), enginetest.Options{})
				if r := sess.Result; r == nil || r.Code != 0 || r.CommittedVersion != 2 {
					return 0, fmt.Errorf("engine: %+v\n%s", r, sess.Stderr.String())
				}
				ps := sess.Cmd().ProcessState
				rssEngine = max(rssEngine, ps.SysUsage().(*syscall.Rusage).Maxrss<<10)
				cpuEngine += ps.UserTime() + ps.SystemTime()
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
			b.ReportMetric(float64(rssEngine>>20), "engine-MiB")
			b.ReportMetric(float64(rssBare>>20), "bare-MiB")
		})
	}
}
