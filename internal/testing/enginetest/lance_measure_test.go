package enginetest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
)

// TestLanceMeasure is the larger measured run of the issue note (STEWARD_LANCE_MEASURE=1 only):
// process start to `import lance`, and BTREE / BITMAP on 1M rows and IVF_PQ on 100k x 128 through
// the engine (its dataset served through the harness's gateway) against the same pylance build in
// a bare python process straight on the store, with peak RSS.
func TestLanceMeasure(t *testing.T) {
	if os.Getenv("STEWARD_LANCE_MEASURE") != "1" {
		t.Skip("set STEWARD_LANCE_MEASURE=1 for the measured run")
	}
	l := needLance(t)
	var imports []time.Duration
	for i := 0; i < 10; i++ {
		start := time.Now()
		if err := exec.Command(l.python, "-B", "-s", "-E", "-c", "import lance").Run(); err != nil {
			t.Fatal(err)
		}
		imports = append(imports, time.Since(start))
	}
	sort.Slice(imports, func(i, j int) bool { return imports[i] < imports[j] })
	t.Logf("process start -> import lance done: median %v (min %v, max %v)", imports[5], imports[0], imports[9])

	cases := []struct {
		c         indexCase
		rows, dim int
		name      string
	}{
		{indexCase{"BTREE", "id", nil}, 1_000_000, 0, "idx_id"},
		{indexCase{"BITMAP", "category", nil}, 1_000_000, 0, "idx_cat"},
		{indexCase{"IVF_PQ", "vec", map[string]string{"num_partitions": "64", "num_sub_vectors": "16"}}, 100_000, 128, "idx_vec"},
	}
	for _, m := range cases {
		s := localStore(t)
		for _, who := range []string{"engine", "bare"} {
			path := "ds-" + who
			l.ctl(t, nil, "create", s.uri(path), "--rows", fmt.Sprint(m.rows), "--dim", fmt.Sprint(m.dim))
			var wall time.Duration
			var rss int64
			if who == "engine" {
				sess := run(t, l, mutateReq(s, path, "inv-m", 1, "CREATE", m.c, m.name), enginetest.Options{})
				if sess.Result == nil || sess.Result.Code != 0 {
					t.Fatalf("%+v %s", sess.Result, sess.Stderr.String())
				}
				wall, rss = sess.Wall, sess.Cmd().ProcessState.SysUsage().(*syscall.Rusage).Maxrss
			} else {
				r, err := enginetest.BareBuild(context.Background(), l.python, l.dir, s.uri(path), m.c.column, m.c.typ, m.name, m.c.params)
				if err != nil {
					t.Fatal(err)
				}
				wall, rss = r.Wall, r.PeakRSS>>10
			}
			t.Logf("%s %d rows: %s process wall %v, peak RSS %d MiB", m.c.typ, m.rows, who, wall.Round(time.Millisecond), rss/1024)
		}
	}
}
