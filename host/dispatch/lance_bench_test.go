package dispatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
)

// BenchmarkLanceDispatch: 100 small Lance mutations (a BTREE on the id column of 10k rows, ten
// datasets) driven through this dispatcher (bbolt journal) and a real sidecar with the Lance
// engine as users install it, against the same builds in bare pylance processes run one after
// another (enginetest.BareIndex), in ABBA halves of 50 (enginetest.ABBA): the throughput a host
// gets from steward for a stream of small real-engine jobs. A dispatcher half streams 5 jobs per
// dataset, the ten datasets side by side (driveStreams); its figure is jobs/s from the first
// submit to the last commit. Every half works on fresh copies of the ten datasets. Run with
// -benchtime 1x; make bench repeats rounds.
//
// Beside the ratio, what bounds it: the whole machine's CPU per job while the dispatcher's
// halves run (/proc/stat: engines, sidecar, dispatcher, kernel; "dispatch-cpu-ms/job") and its
// idle share then, the Lance engines' own CPU per job (their timing lines), a bare process's CPU
// per job (rusage), and the ceiling a machine of runtime.NumCPU() CPUs puts on the ratio at that
// CPU per job: NumCPU × (bare wall per job) / (dispatch CPU per job).
func BenchmarkLanceDispatch(b *testing.B) {
	testenv.NeedRoot(b)
	py, dir, err := testbin.LanceTools()
	if err != nil {
		testenv.Unavailable(b, "Lance engine not installed: "+err.Error())
	}
	const datasets, perDataset = 10, 5
	src, err := enginetest.CachedLanceDataset(py, dir, 10_000, 0)
	if err != nil {
		b.Fatal(err)
	}
	// The engine as users run it: installed, its modules compiled (the bare baseline is the same
	// pinned pylance in the tools venv).
	engine, err := testbin.InstalledLance(b)
	if err != nil {
		b.Fatal(err)
	}
	sc := testsidecar.Start(b, testsidecar.Options{
		Env:  append(os.Environ(), "TMPDIR="+testenv.GuestDir(b)),
		Args: []string{"--engine", "lance=" + engine}})
	store, err := OpenBolt(filepath.Join(b.TempDir(), "jobs.db"), BoltOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	d, err := New(Config{Store: store, MaxPerRound: 64, MaxInFlightPerSidecar: 64, MaxUnresolved: 1 << 20,
		MaxUnresolvedPerDataset: 1 << 20, ExecuteDeadline: 3 * time.Minute, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	if err := d.AddSidecar("n1", sc.Client); err != nil {
		b.Fatal(err)
	}
	// The dispatcher runs as a host runs it: Run starts a round at a submit and at an answer
	// (and every Interval); the benchmark only reads its jobs.
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	b.Cleanup(func() {
		stop()
		<-ran
	})
	root := testenv.GuestDir(b)
	half := 0
	copies := func() []string {
		half++
		paths := make([]string, datasets)
		for i := range paths {
			paths[i] = fmt.Sprintf("h%d-ds%d", half, i)
			if err := enginetest.LinkCopy(src, filepath.Join(root, paths[i])); err != nil {
				b.Fatal(err)
			}
			testenv.GuestOwn(b, filepath.Join(root, paths[i]))
		}
		return paths
	}
	ctx := context.Background()
	var busyD, idleD, cpuB time.Duration // the machine's, over the dispatcher's halves; bare processes'
	viaDispatch := func() (time.Duration, error) {
		paths := copies()
		busy0, idle0, err := testenv.MachineCPU()
		if err != nil {
			return 0, err
		}
		start := time.Now()
		if err := driveStreams(ctx, d, root, paths, perDataset); err != nil {
			return 0, err
		}
		wall := time.Since(start)
		busy1, idle1, err := testenv.MachineCPU()
		busyD, idleD = busyD+busy1-busy0, idleD+idle1-idle0
		return wall, err
	}
	bare := func() (time.Duration, error) {
		paths := copies()
		var sum time.Duration
		for w := range perDataset {
			for _, p := range paths {
				r, _, err := enginetest.BareIndex(ctx, py, dir, nil, filepath.Join(root, p), "id", rpc.IndexBTree, fmt.Sprintf("ix%d", w), nil)
				if err != nil {
					return 0, err
				}
				sum += r.Wall
				cpuB += r.CPU
			}
		}
		return sum, nil
	}
	// The spares become Lance engines (the first Lance call starts cold) and start up.
	if _, err := viaDispatchOne(ctx, d, root, copies()[0]); err != nil {
		b.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	var sumD, sumB time.Duration
	logged := len(sc.Logs.String()) // the warm-up's engines are not counted
	b.ResetTimer()
	for range b.N {
		x, y, err := enginetest.ABBA(viaDispatch, bare)
		if err != nil {
			b.Fatal(err)
		}
		sumD, sumB = sumD+x, sumB+y
	}
	b.StopTimer()
	jobs := float64(2 * perDataset * datasets * b.N)
	b.ReportMetric(jobs/sumD.Seconds(), "dispatch-jobs/s")
	b.ReportMetric(jobs/sumB.Seconds(), "bare-jobs/s")
	b.ReportMetric(sumB.Seconds()/sumD.Seconds(), "dispatch/bare")
	engineCPU, engines := enginetest.LanceEngineCPU(sc.Logs.String()[logged:])
	if engines != int(jobs) {
		b.Fatalf("%d Lance engines logged their CPU for %.0f jobs", engines, jobs)
	}
	perJob := func(d time.Duration) float64 { return float64(d.Milliseconds()) / jobs }
	b.ReportMetric(perJob(busyD), "dispatch-cpu-ms/job")
	b.ReportMetric(perJob(engineCPU), "engine-cpu-ms/job")
	b.ReportMetric(perJob(cpuB), "bare-cpu-ms/job")
	b.ReportMetric(perJob(sumB), "bare-wall-ms/job")
	b.ReportMetric(float64(idleD)/float64(busyD+idleD), "dispatch-idle-share")
	b.ReportMetric(float64(runtime.NumCPU())*perJob(sumB)/perJob(busyD), "cpu-ceiling")
}

// driveStreams runs n Lance BTREE CREATEs on each dataset of paths (file:// under root) through
// d, as a host streams a dataset's mutations: a dataset's next job (index "ix<w>") is submitted
// once its last one committed, pinned at the version that commit made (the datasets start at 1),
// and the datasets run side by side. Any job settled otherwise fails.
func driveStreams(ctx context.Context, d *Dispatcher, root string, paths []string, n int) error {
	submit := func(path string, w int) (string, error) {
		j, err := d.Submit(ctx, Request{Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + root}, Path: path},
			AdmittedVersion: int64(w + 1), Op: rpc.OpCreate, Engine: "lance",
			Index: rpc.IndexSpec{Name: fmt.Sprintf("ix%d", w), Columns: []string{"id"}, Type: rpc.IndexBTree}})
		return j.ID, err
	}
	current := make([]string, len(paths)) // each dataset's job in flight; "" once its n committed
	committed := make([]int, len(paths))
	for i, p := range paths {
		id, err := submit(p, 0)
		if err != nil {
			return err
		}
		current[i] = id
	}
	deadline := time.Now().Add(5 * time.Minute)
	for left := len(paths); left > 0; {
		for i, id := range current {
			if id == "" {
				continue
			}
			j, err := d.Get(id)
			if err != nil {
				return err
			}
			switch {
			case j.State == StateCommitted && !j.Active():
				committed[i]++
				current[i] = ""
				if committed[i] == n {
					left--
				} else if current[i], err = submit(paths[i], committed[i]); err != nil {
					return err
				}
			case j.State.Settled() && !j.Active(), j.State == StateUnknown:
				return fmt.Errorf("job %s: %s, not committed (%s)", id, j.State, historyEvents(j))
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d datasets' jobs not all committed after 5 minutes", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// viaDispatchOne runs one Lance CREATE through d and waits for its commit.
func viaDispatchOne(ctx context.Context, d *Dispatcher, root, path string) (Job, error) {
	j, err := d.Submit(ctx, Request{Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: "file://" + root}, Path: path},
		AdmittedVersion: 1, Op: rpc.OpCreate, Engine: "lance", Index: rpc.IndexSpec{Name: "warm", Columns: []string{"id"}, Type: rpc.IndexBTree}})
	if err != nil {
		return Job{}, err
	}
	return j, driveUntilSettled(ctx, d, []string{j.ID})
}

// driveUntilSettled waits until every job of ids is COMMITTED and d has nothing in flight for
// it, while d.Run drives the rounds; any other settled state fails.
func driveUntilSettled(ctx context.Context, d *Dispatcher, ids []string) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		done := 0
		for _, id := range ids {
			j, err := d.Get(id)
			if err != nil {
				return err
			}
			switch {
			case j.State == StateCommitted && !j.Active():
				done++
			case j.State.Settled() && !j.Active(), j.State == StateUnknown:
				return fmt.Errorf("job %s: %s, not committed (%s)", id, j.State, historyEvents(j))
			}
		}
		if done == len(ids) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs not settled after 5 minutes")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
