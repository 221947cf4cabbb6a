package sidecar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
)

// lanceBuild is one index build of the Lance rows: its type, column and parameters, on a cached
// dataset of rows rows (a vec column of dim float32 unless dim is 0).
type lanceBuild struct {
	name        string
	typ, column string
	params      map[string]string
	rows, dim   int
}

var lanceBuilds = []lanceBuild{
	{"BTREE-1M", "BTREE", "id", nil, 1_000_000, 0},
	{"BITMAP-1M", "BITMAP", "category", nil, 1_000_000, 0},
	{"IVF_PQ-100k", "IVF_PQ", "vec", map[string]string{"num_partitions": "64", "num_sub_vectors": "16"}, 100_000, 128},
}

// BenchmarkLanceSidecar: real Lance through the real sidecar, each iteration against its bare
// baseline in ABBA order (sidecar, bare, bare, sidecar; BAAB on even rounds, enginetest.ABBA), on
// copies of one cached dataset (enginetest.CachedLanceDataset: hard links on the local store,
// uploads on MinIO), on a local store (noop, build/<case>) and on MinIO (noop-minio,
// build-minio/<case>), each store with a sidecar of its own. Run with -benchtime 1x; make bench
// repeats rounds.
//
//   - noop: CREATE IF NOT EXISTS of an index the dataset holds, answered IF_NOT_EXISTS_NOOP
//     (admission, a prestarted engine thawed, hello, request, the engine opens the pinned
//     version and finds the index, answer, teardown, the outcome from the gateway's record),
//     against a bare engine process start on the same store (enginetest.BareOpen: python,
//     import lance, open the dataset). One untimed call first makes the spares Lance engines,
//     as for a host whose calls go to one engine, and a pause lets them start and be frozen.
//     It also reports the idle spare's memory as hello gives it (idle-MiB).
//   - build/<case>: a CREATE through the sidecar (a prestarted engine, custody by the gateway,
//     the claimed commit at pinned+1, the outcome from the gateway's record and storage before
//     COMMITTED leaves) against the same build in a bare pylance process (enginetest.BareIndex).
func BenchmarkLanceSidecar(b *testing.B) {
	testenv.NeedRoot(b)
	for _, st := range []struct {
		suffix string
		minio  bool
	}{{"", false}, {"-minio", true}} {
		benchLanceStore(b, st.suffix, st.minio)
	}
}

func benchLanceStore(b *testing.B, suffix string, onMinIO bool) {
	// The production default of --worker-memory (1 GiB), not the tests' 256 MiB: the IVF_PQ
	// build peaks near 400 MiB.
	l := newLanceSidecar(b, onMinIO, "--worker-memory", "1073741824")
	ctx := context.Background()
	n := 0
	fresh := func(src string) string {
		n++
		path := fmt.Sprintf("ds-%d", n)
		if onMinIO {
			uploadDir(b, l.mc, l.bucket, src, path)
			return path
		}
		if err := enginetest.LinkCopy(src, filepath.Join(l.root, path)); err != nil {
			b.Fatal(err)
		}
		// The contained engine runs as the guest: it writes into the copy (its new files; the
		// linked ones are never written in place). Chowning a link chowns the cached file too,
		// which only bare root processes read besides.
		testenv.GuestOwn(b, filepath.Join(l.root, path))
		return path
	}
	mutate := func(p rpc.MutateParams, want string) (time.Duration, error) {
		start := time.Now()
		res, err := l.c.Mutate(ctx, p)
		took := time.Since(start)
		if err != nil || res.CompletionReason != want {
			return 0, fmt.Errorf("%s: %v %+v", p.InvocationID, err, res)
		}
		return took, nil
	}

	b.Run("noop"+suffix, func(b *testing.B) {
		src, err := enginetest.CachedLanceDataset(l.python, l.dir, 100_000, 0)
		if err != nil {
			b.Fatal(err)
		}
		path := fresh(src)
		if _, err := mutate(l.lanceParams(randID("inv-"), path, 1, rpc.OpCreate, "idx", "id", "BTREE", nil), rpc.CompletionCommitted); err != nil {
			b.Fatal(err)
		}
		// The spares' python and `import lance`, off the clock, and past their freeze (2 s after
		// launch): the first call thaws the spare it takes, as a call does after a pause.
		time.Sleep(2500 * time.Millisecond)
		h, err := l.c.Hello(ctx)
		if err != nil {
			b.Fatal(err)
		}
		noop := func() (time.Duration, error) {
			p := l.lanceParams(randID("inv-"), path, 2, rpc.OpCreate, "idx", "id", "BTREE", nil)
			p.IfNotExists = true
			return mutate(p, rpc.CompletionIfNotExistsNoop)
		}
		start := func() (time.Duration, error) {
			r, _, err := enginetest.BareOpen(ctx, l.python, l.s3, l.uri(path))
			return r.Wall, err
		}
		enginetest.BenchABBA(b, "noop", "start", noop, start)
		b.ReportMetric(float64(idleMemory(h, "lance"))/(1<<20), "idle-MiB")
	})

	for _, m := range lanceBuilds {
		b.Run("build"+suffix+"/"+m.name, func(b *testing.B) {
			src, err := enginetest.CachedLanceDataset(l.python, l.dir, m.rows, m.dim)
			if err != nil {
				b.Fatal(err)
			}
			viaSidecar := func() (time.Duration, error) {
				p := l.lanceParams(randID("inv-"), fresh(src), 1, rpc.OpCreate, "idx", m.column, m.typ, m.params)
				return mutate(p, rpc.CompletionCommitted)
			}
			bare := func() (time.Duration, error) {
				r, _, err := enginetest.BareIndex(ctx, l.python, l.dir, l.s3, l.uri(fresh(src)), m.column, m.typ, "idx", m.params)
				return r.Wall, err
			}
			enginetest.BenchABBA(b, "sidecar", "bare", viaSidecar, bare)
		})
	}
}
