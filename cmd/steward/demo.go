package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/dataset"
	"github.com/cba1309c/steward/storecfg"
	"github.com/hashicorp/go-hclog"
)

// runDemo is `steward demo`: a database host in one command. It makes a dataset, launches the
// sidecar through go-plugin from a host that drives a durable dispatcher, builds a BTREE and a
// BITMAP index with live progress, lets one job be OOM-killed under a small memory limit and
// classified, answers a lookup through the index and by full scan, and prints the jobs table and
// the ledger's figures.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rows := fs.Int64("rows", 2_000_000, "rows in the demo dataset")
	dir := fs.String("dir", "", "working directory (default: a new temporary directory, removed afterwards); its store/ folder is the contained workers' (as root: uid 65534, which must be able to search the directory)")
	s3 := fs.String("s3", "", "run against S3 instead of the local store: s3://bucket[/prefix]; endpoint and credentials from STEWARD_S3_ENDPOINT, STEWARD_S3_ACCESS_KEY, STEWARD_S3_SECRET_KEY")
	oomLimit := fs.Int64("oom-limit", 24<<20, "memory limit (bytes) of the job that is meant to be OOM-killed")
	vectors := fs.Int64("vectors", 200_000, "rows of 128-dimensional vectors in the Lance act (0: skip it)")
	vecOOM := fs.Int64("vector-oom-limit", 256<<20, "memory limit (bytes) of the IVF_PQ build that is meant to be OOM-killed")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	d := &demo{out: stdout, rows: *rows, oomLimit: *oomLimit, vectors: *vectors, vecOOM: *vecOOM, bars: map[string]*bar{}}
	if err := d.run(ctx, *dir, *s3); err != nil {
		fmt.Fprintln(stderr, "steward demo:", err)
		return 1
	}
	return 0
}

// errNoIsolation: the demo cannot run its mutations on this machine.
var errNoIsolation = errors.New("worker isolation unavailable (run as root, or see README: running as non-root)")

type demo struct {
	out      io.Writer
	rows     int64
	oomLimit int64
	vectors  int64  // rows of the Lance act's dataset (0: no Lance act)
	vecOOM   int64  // memory limit of its IVF_PQ build meant to be OOM-killed
	lance    string // the --engine flag of the Lance engine; "" when it is not installed
	lanceErr error  // why not
	ref      rpc.DatasetRef
	store    storage.Store
	creds    *rpc.Credentials
	client   *host.Client
	disp     *dispatch.Dispatcher

	mu   sync.Mutex
	bars map[string]*bar // invocation id → progress bar
}

func (d *demo) step(n int, title, format string, args ...any) {
	fmt.Fprintf(d.out, "\n%d. %-10s %s\n", n, title, fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context, dir, s3 string) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "steward-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp // private (0700): workers reach the store only through the sidecar's gateway
	}
	fmt.Fprintf(d.out, "steward demo — a database host driving index mutations through the steward sidecar\n")
	// The sidecar first: a machine where it cannot isolate workers is told so before any data is made.
	if err := d.launch(ctx, dir, s3); err != nil {
		return err
	}
	defer d.client.Close()
	defer d.disp.Close()
	if err := d.makeDataset(ctx, dir, s3); err != nil {
		return err
	}

	d.step(3, "indexes", "two jobs through the dispatcher (journaled before any I/O, sent exactly once)")
	if err := d.job(ctx, dispatch.Request{ID: "build-by-id", AdmittedVersion: 1, Op: rpc.OpCreate,
		Index: rpc.IndexSpec{Name: "by_id", Columns: []string{"id"}, Type: rpc.IndexBTree}}); err != nil {
		return err
	}
	if err := d.job(ctx, dispatch.Request{ID: "build-by-category", AdmittedVersion: 2, Op: rpc.OpCreate,
		Index: rpc.IndexSpec{Name: "by_category", Columns: []string{"category"}, Type: rpc.IndexBitmap}}); err != nil {
		return err
	}
	d.step(4, "oom", "a BTREE on name under a %s memory limit: the kernel kills it, steward classifies it", bytesIEC(d.oomLimit))
	if err := d.job(ctx, dispatch.Request{ID: "build-by-name-small-memory", AdmittedVersion: 3, Op: rpc.OpCreate,
		Index:  rpc.IndexSpec{Name: "by_name", Columns: []string{"name"}, Type: rpc.IndexBTree},
		Limits: &rpc.WorkerLimits{MemoryBytes: d.oomLimit}}); err != nil {
		return err
	}
	if err := d.lookups(ctx); err != nil {
		return err
	}
	if err := d.vectorAct(ctx); err != nil {
		return err
	}
	if err := d.segmentAct(ctx); err != nil {
		return err
	}
	d.jobsTable()
	d.ledger(ctx)
	return nil
}

func (d *demo) makeDataset(ctx context.Context, dir, s3 string) error {
	arg, path := filepath.Join(dir, "store"), "demo/events"
	if s3 != "" {
		arg, path = s3, "demo/events-"+time.Now().Format("150405")
	} else if err := os.MkdirAll(arg, 0o700); err != nil {
		return fmt.Errorf("demo store: %w", err)
	}
	spec, err := storeSpec(arg)
	if err != nil {
		return fmt.Errorf("demo store: %w", err)
	}
	cfg, err := storecfg.FromSpec(spec, d.creds)
	if err != nil {
		return err
	}
	d.ref = rpc.DatasetRef{Store: spec, Path: path}
	store, err := storage.OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	d.store = store
	d.step(2, "dataset", "%s rows of generated events → %s %s", grouped(d.rows), d.ref.Store.URL, d.ref.Path)
	b := newBar(d.out, "rows written", d.rows)
	start := time.Now()
	src := &countingSource{RowSource: dataset.NewGenerator(d.rows, 42), progress: b.set}
	_, res, err := dataset.Create(ctx, store, d.ref.Path, src, dataset.WriteOptions{RowsPerFragment: 500_000})
	if err != nil {
		return err
	}
	b.finish(fmt.Sprintf("version %d, %d fragments, %v", res.Version, len(res.Created), time.Since(start).Round(time.Millisecond)))
	return nil
}

// countingSource reports rows as the generator hands them out.
type countingSource struct {
	dataset.RowSource
	n        int64
	progress func(int64)
}

func (c *countingSource) Next(ctx context.Context) (dataset.Batch, error) {
	b, err := c.RowSource.Next(ctx)
	if err == nil {
		c.n += int64(b.Rows)
		c.progress(c.n)
	}
	return b, err
}

func (d *demo) launch(ctx context.Context, dir, s3 string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	start := time.Now()
	args := []string{"--state-dir", filepath.Join(dir, "state")}
	if d.vectors > 0 {
		if d.lance, d.lanceErr = lanceEngineFlag(); d.lanceErr == nil {
			args = append(args, "--engine", d.lance)
		}
	}
	// The sidecar never takes keys from its environment: the demo's own keys (from its
	// environment, a short-lived command) go to the sidecar in a 0600 file, for the demo's store only.
	env := storecfg.WithoutEnvKeys(os.Environ())
	if s3 != "" {
		d.creds = envCredentials()
	}
	if d.creds != nil {
		spec, err := storeSpec(s3)
		if err != nil {
			return fmt.Errorf("demo store: %w", err)
		}
		p, err := spec.Parse()
		if err != nil {
			return err
		}
		file := filepath.Join(dir, "s3-credentials")
		if err := os.WriteFile(file, storecfg.FormatCredentials(*d.creds), 0o600); err != nil {
			return err
		}
		args = append(args, "--s3-credentials-file", file, "--allow-store", p.Name())
	}
	d.client, err = host.Launch(ctx, host.Config{
		Path: self, Args: args, Env: env,
		Logger:   hclog.New(&hclog.LoggerOptions{Name: "demo", Level: hclog.Error}),
		OnNotify: d.onProgress,
	})
	if err != nil {
		return err
	}
	h := d.client.Info()
	if h.Isolation == nil || !h.Isolation.Verified {
		reason := "the sidecar reported no isolation"
		if h.Isolation != nil {
			reason = h.Isolation.Reason
		}
		_ = d.client.Close()
		return fmt.Errorf("%w: the sidecar started, but it refuses every index mutation because worker isolation did not verify:\n%s", errNoIsolation, reason)
	}
	if d.lance != "" && !slices.ContainsFunc(h.Engines, func(e rpc.EngineInfo) bool { return e.Name == "lance" }) {
		// Its probe failed: the sidecar logs why (a contained worker's guest must be able to
		// execute the venv's interpreter and read the venv and engines/lance).
		d.lance, d.lanceErr = "", fmt.Errorf("the sidecar did not register the Lance engine (%s): its hello probe failed in a worker domain", d.lance)
	}
	iso := h.Isolation.Mode + ", verified"
	d.step(1, "sidecar", "launched through go-plugin (AutoMTLS) in %v", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(d.out, "   pid %d · epoch %s · isolation %s · %d executors\n", h.Pid, h.Epoch[:12], iso, h.Limits.ExecutorSlots)
	store, err := dispatch.OpenBolt(filepath.Join(dir, "jobs.db"), dispatch.BoltOptions{})
	if err != nil {
		return err
	}
	d.disp, err = dispatch.New(dispatch.Config{Store: store, Interval: 100 * time.Millisecond,
		ExecuteDeadline: 5 * time.Minute, ResolveRetryInterval: 200 * time.Millisecond,
		Credentials: func(context.Context, rpc.DatasetRef) (*rpc.Credentials, error) { return d.creds, nil },
		Logger:      hclog.New(&hclog.LoggerOptions{Name: "dispatch", Level: hclog.Error})})
	if err != nil {
		return err
	}
	if err := d.disp.AddSidecar("node-1", d.client); err != nil {
		return err
	}
	go d.disp.Run(ctx)
	fmt.Fprintf(d.out, "   dispatcher journal: %s\n", store.Path())
	return nil
}

// job submits one job and follows it to a terminal state, drawing its progress.
func (d *demo) job(ctx context.Context, r dispatch.Request) error {
	if r.Dataset.Path == "" {
		r.Dataset = d.ref
	}
	j, err := d.disp.Submit(ctx, r)
	if err != nil {
		return err
	}
	label := fmt.Sprintf("%s %s(%s)", r.Index.Type, r.Index.Name, strings.Join(r.Index.Columns, ","))
	b := newBar(d.out, label, 0)
	for {
		j, err = d.disp.Get(j.ID)
		if err != nil {
			return err
		}
		if j.InvocationID != "" {
			d.mu.Lock()
			d.bars[j.InvocationID] = b
			d.mu.Unlock()
		}
		if j.State.Settled() || (j.State == dispatch.StateUnknown && j.Resolution != nil) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	b.finish(describe(j))
	return nil
}

func describe(j dispatch.Job) string {
	var parts []string
	if r := j.Result; r != nil {
		parts = append(parts, fmt.Sprintf("%s code %d", r.Phase, r.Code))
		if r.OOMKilled {
			parts = append(parts, "OOM-killed")
		}
		if r.CommittedVersion > 0 {
			parts = append(parts, fmt.Sprintf("committed v%d", r.CommittedVersion))
		}
		if r.PeakMemoryBytes > 0 {
			parts = append(parts, "peak "+bytesIEC(r.PeakMemoryBytes))
		}
		if r.WallMs > 0 {
			parts = append(parts, fmt.Sprintf("%v", time.Duration(r.WallMs)*time.Millisecond))
		}
	}
	if res := j.Resolution; res != nil {
		parts = append(parts, "resolved "+res.Outcome)
	}
	return fmt.Sprintf("→ %s (%s)", j.State, strings.Join(parts, ", "))
}

func (d *demo) onProgress(method string, params json.RawMessage) {
	if method != rpc.NotifyProgress {
		return
	}
	var p rpc.ProgressParams
	if json.Unmarshal(params, &p) != nil {
		return
	}
	d.mu.Lock()
	b := d.bars[p.InvocationID]
	d.mu.Unlock()
	if b != nil {
		b.setStage(p.Stage)
		b.setTotal(p.Total)
		b.set(p.Done)
	}
}

func (d *demo) lookups(ctx context.Context) error {
	ds, err := dataset.Open(ctx, d.store, d.ref.Path, 0)
	if err != nil {
		return err
	}
	d.step(5, "lookups", "through the new indexes vs a full scan of version %d", ds.Version())
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "   predicate\tindex\trows\tvia index\tfull scan\tspeed-up\t")
	for _, q := range []struct {
		index string
		pred  dataset.Predicate
		text  string
	}{
		{"by_id", dataset.Eq("id", d.rows/2), fmt.Sprintf("id = %d", d.rows/2)},
		{"by_id", dataset.Between("id", int64(1000), int64(1999)), "id BETWEEN 1000 AND 1999"},
		{"by_category", dataset.Eq("category", "cat-07"), `category = "cat-07"`},
	} {
		t0 := time.Now()
		viaIndex, err := ds.QueryIndex(ctx, q.index, q.pred)
		if err != nil {
			return err
		}
		ti := time.Since(t0)
		t0 = time.Now()
		scan, err := ds.Scan(ctx, q.pred)
		if err != nil {
			return err
		}
		ts := time.Since(t0)
		if len(scan.RowIDs) != len(viaIndex.RowIDs) {
			return fmt.Errorf("%s: index found %d rows, scan %d", q.text, len(viaIndex.RowIDs), len(scan.RowIDs))
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%v\t%v\t%.0f×\t\n", q.text, q.index, grouped(int64(len(scan.RowIDs))),
			ti.Round(time.Microsecond), ts.Round(time.Millisecond), float64(ts)/float64(max(ti, time.Microsecond)))
	}
	return tw.Flush()
}

func (d *demo) jobsTable() {
	jobs, err := d.disp.List(dispatch.ListOptions{})
	if err != nil {
		fmt.Fprintln(d.out, "   jobs:", err)
		return
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Created.Before(jobs[b].Created) })
	d.step(7, "jobs", "the dispatcher's durable journal (keep it with --dir D, then: steward jobs list --store D/jobs.db)")
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   JOB\tOP\tINDEX\tSTATE\tPHASE\tCODE\tVERSION\tOOM\tTRANSITIONS")
	for _, j := range jobs {
		phase, code, version, oom := "-", "-", "-", "-"
		if r := j.Result; r != nil {
			phase, code, oom = r.Phase, fmt.Sprint(r.Code), fmt.Sprint(r.OOMKilled)
			if r.CommittedVersion > 0 {
				version = fmt.Sprint(r.CommittedVersion)
			}
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", j.ID, j.Op, j.Index.Name, j.State, phase, code, version, oom, len(j.History))
	}
	tw.Flush()
}

func (d *demo) ledger(ctx context.Context) {
	var st rpc.ObjectsStatusResult
	err := d.client.Call(ctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st)
	d.step(8, "ledger", "custody of uploaded-but-unpublished objects")
	if err != nil {
		fmt.Fprintln(d.out, "   objects.status:", err)
		return
	}
	l := st.Ledger
	tw := tabwriter.NewWriter(d.out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "   tickets held now\t%s of %s (high water %s)\n", grouped(int64(l.Used)), grouped(int64(l.Capacity)), grouped(int64(l.HighWater)))
	fmt.Fprintf(tw, "   objects deleted by cleanup\t%s\n", grouped(int64(l.Deleted)))
	fmt.Fprintf(tw, "   pending delete / retry\t%d / %d (oldest retry %v)\n", l.PendingDelete, l.PendingRetry, time.Duration(l.OldestRetryAgeMs)*time.Millisecond)
	fmt.Fprintf(tw, "   delete failures\t%d\n", l.DeleteFailures)
	fmt.Fprintf(tw, "   reservations refused\t%d\n", l.AdmissionFailures)
	fmt.Fprintf(tw, "   invocations awaiting a verdict\t%d\n", l.Unsettled)
	fmt.Fprintf(tw, "   prefix tickets held\t%d (%s objects deleted under them)\n", l.Prefixes, grouped(int64(l.PrefixObjectsDeleted)))
	tw.Flush()
}
