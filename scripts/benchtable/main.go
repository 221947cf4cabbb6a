// Command benchtable reads `go test -bench` output (from every package, concatenated) on stdin and
// prints one table of steward's headline ratios, each figure against the baseline measured in the
// same run. `make bench` pipes the whole benchmark run through it.
package main

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// results maps a benchmark name (without the -GOMAXPROCS suffix) to its metrics by unit.
type results map[string]map[string]float64

var line = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func parse(sc *bufio.Scanner) results {
	r := results{}
	for sc.Scan() {
		if name, metrics, ok := parseLine(sc.Text()); ok {
			r[name] = metrics
		}
	}
	return r
}

// parseLine reads one benchmark result line: its name (without "Benchmark" and the -GOMAXPROCS
// suffix) and its metrics by unit.
func parseLine(text string) (string, map[string]float64, bool) {
	m := line.FindStringSubmatch(text)
	if m == nil {
		return "", nil, false
	}
	metrics := map[string]float64{}
	f := strings.Fields(m[2])
	for i := 0; i+1 < len(f); i += 2 {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			metrics[f[i+1]] = v
		}
	}
	return strings.TrimPrefix(m[1], "Benchmark"), metrics, true
}

type row struct{ headline, figure, baseline, ratio, goal string }

func (r results) get(name, unit string) (float64, bool) {
	m, ok := r[name]
	if !ok {
		return 0, false
	}
	v, ok := m[unit]
	return v, ok
}

// pair compares two benchmarks' ns/op.
func (r results) pair(headline, name, base, goal string) (row, bool) {
	a, ok1 := r.get(name, "ns/op")
	b, ok2 := r.get(base, "ns/op")
	if !ok1 || !ok2 || b == 0 {
		return row{}, false
	}
	return row{headline, dur(a) + "  " + name, dur(b) + "  " + base, fmt.Sprintf("%.2f×", a/b), goal}, true
}

// delta is a benchmark's ns/op minus its baseline's, in milliseconds (goals like "≤ +1 ms").
func (r results) delta(headline, name, base, goal string) (row, bool) {
	a, ok1 := r.get(name, "ns/op")
	b, ok2 := r.get(base, "ns/op")
	if !ok1 || !ok2 {
		return row{}, false
	}
	return row{headline, dur(a) + "  " + name, dur(b) + "  " + base, fmt.Sprintf("%+.2f ms", (a-b)/1e6), goal}, true
}

func dur(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

func (r results) rows() []row {
	var out []row
	add := func(x row, ok bool) {
		if ok {
			out = append(out, x)
		}
	}
	for _, mode := range []string{"hybrid", "v1", "v2"} {
		// The goal's row: the isolated launch and the raw ForkExec alternated ABBA in one
		// benchmark (issue #15: same-run ratios); the two separate sub-benchmarks below it, run
		// seconds apart, for comparison with earlier runs.
		if v, ok := r.get("LaunchNoop/paired-"+mode, "isolated/raw"); ok {
			iso, _ := r.get("LaunchNoop/paired-"+mode, "isolated-ns")
			raw, _ := r.get("LaunchNoop/paired-"+mode, "raw-ns")
			out = append(out, row{"isolation launch overhead", dur(iso) + "  isolated, LaunchNoop/paired-" + mode,
				dur(raw) + "  raw ForkExec, alternated ABBA", fmt.Sprintf("%.2f×", v), "≤ 1.25×"})
		}
		add(r.pair("isolation launch overhead, separate runs", "LaunchNoop/isolated-"+mode, "LaunchNoop/raw-forkexec", "—"))
		add(r.delta("containment launch cost", "LaunchNoop/contained-"+mode, "LaunchNoop/isolated-"+mode, "≤ +1 ms"))
		// Issue 43's figure: the same two launches alternated in one benchmark, their medians.
		if v, ok := r.get("LaunchNoop/contained-paired-"+mode, "contained-excess-ms"); ok {
			c, _ := r.get("LaunchNoop/contained-paired-"+mode, "contained-p50-ns")
			u, _ := r.get("LaunchNoop/contained-paired-"+mode, "uncontained-p50-ns")
			out = append(out, row{"contained launch, p50, alternated", dur(c) + "  contained-paired-" + mode,
				dur(u) + "  uncontained, alternated", fmt.Sprintf("%+.2f ms", v), "≤ +1 ms"})
		}
	}
	// The kernel's part of the contained launch's excess, in the same run: the namespaces and id
	// maps alone, nothing of steward's (docs/PERFORMANCE.md §6.3).
	if v, ok := r.get("LaunchNoop/namespace-floor", "namespace-excess-ms"); ok {
		n, _ := r.get("LaunchNoop/namespace-floor", "namespaced-p50-ns")
		p, _ := r.get("LaunchNoop/namespace-floor", "plain-p50-ns")
		out = append(out, row{"  its kernel floor: the domain's namespaces alone, p50", dur(n) + "  static binary, namespaced",
			dur(p) + "  the same, plain, alternated", fmt.Sprintf("%+.2f ms", v), "—"})
	}
	add(r.pair("raw launch vs static floor", "LaunchNoop/raw-forkexec", "LaunchNoop/static-floor", "≤ 2×"))
	for _, mode := range []string{"hybrid", "v1", "v2"} {
		add(r.pair("kill+reap of 50 processes", "KillTree50/ladder-"+mode, "KillTree50/bare-"+mode, "≤ 1.2×"))
		if l, ok := r.get("KillTree50/ladder-"+mode, "cpu-ms/op"); ok {
			if bare, ok := r.get("KillTree50/bare-"+mode, "cpu-ms/op"); ok && bare > 0 {
				out = append(out, row{"kill+reap CPU (sidecar process)", fmt.Sprintf("%.1f ms CPU  ladder-%s", l, mode),
					fmt.Sprintf("%.1f ms CPU bare (its reap untimed)", bare), fmt.Sprintf("%.2f×", l/bare), "—"})
			}
		}
	}
	for _, tr := range []string{"stdio", "plugin"} {
		for _, n := range []string{"1", "64"} {
			add(r.pair("RPC overhead ("+tr+", "+n+" in flight)", "RoundTrip/"+tr+"/steward-hello/inflight="+n, "RoundTrip/"+tr+"/raw-echo/inflight="+n, "≤ 1.2×"))
		}
	}
	add(r.pair("no-op mutation round trip", "MutateNoop/sidecar-noop-mutation", "MutateNoop/isolation-launch-baseline", "≤ 1.3×"))
	// Issue #15's figure: the round trip with a prestarted worker (calls spaced so the spare is
	// up) against the fork+exec+wait of a small static binary, the same round: first against
	// the floor started after the same untimed pause (like for like: both start on an idle
	// machine), then against the floor run back to back (hot), as the issue first measured it.
	add(r.pair("no-op mutation vs static floor, both spaced", "MutateNoop/sidecar-noop-mutation-prestarted", "LaunchNoop/static-floor-spaced", "≤ 2×"))
	add(r.pair("no-op mutation vs static floor", "MutateNoop/sidecar-noop-mutation-prestarted", "LaunchNoop/static-floor", "≤ 2×"))
	add(r.pair("static floor spaced vs back to back", "LaunchNoop/static-floor-spaced", "LaunchNoop/static-floor", "—"))
	if v, ok := r.get("MutateSaturated", "mutations/s"); ok {
		out = append(out, row{"mutations/s, pool saturated", fmt.Sprintf("%.0f /s", v), "—", "—", "—"})
	}
	var names []string
	for name := range r {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if v, ok := r.get(name, "build/read"); ok && strings.HasPrefix(name, "IndexBuild/") {
			read, _ := r.get(name, "read-s")
			build, _ := r.get(name, "build-s")
			peak, _ := r.get(name, "peak-heap-MB")
			what := strings.TrimPrefix(name, "IndexBuild/")
			goal := "≤ 2×"
			if strings.HasSuffix(what, "/btree-id") { // the sorted int64 column
				goal = "≤ 1.5×"
			}
			out = append(out, row{"index build vs column read", fmt.Sprintf("%.2f s  %s", build, what),
				fmt.Sprintf("%.2f s read", read), fmt.Sprintf("%.2f×", v), goal})
			// Reading the column and storing the segment one after the other: a build cannot
			// overlap the two (its first byte depends on every row).
			if rp, ok := r.get(name, "read+put/read"); ok {
				put, _ := r.get(name, "put-s")
				out = append(out, row{"column read + segment put vs column read", fmt.Sprintf("%.2f s put  %s", put, what),
					fmt.Sprintf("%.2f s read", read), fmt.Sprintf("%.2f×", rp), "—"})
				out = append(out, row{"index build vs column read + segment put", fmt.Sprintf("%.2f s  %s", build, what),
					fmt.Sprintf("%.2f s read+put", read+put), fmt.Sprintf("%.2f×", build/(read+put)), "—"})
			}
			// A store server on the same machine (MinIO) takes CPU from the build: the build's
			// and the server's CPU time over the CPUs' time in the build's wall time.
			if busy, ok := r.get(name, "build-busy"); ok {
				cpu, _ := r.get(name, "build-cpu-s")
				srv, _ := r.get(name, "build-server-cpu-s")
				out = append(out, row{"index build, CPUs busy (build + store server)", fmt.Sprintf("%.2f + %.2f s CPU  %s", cpu, srv, what),
					fmt.Sprintf("%.2f s × CPUs", build), fmt.Sprintf("%.2f×", busy), "—"})
			}
			out = append(out, row{"index build peak heap", fmt.Sprintf("%.0f MiB  %s", peak, what),
				"256 MiB budget", fmt.Sprintf("%.2f×", peak/256), "≤ 1×"})
			// Process CPU (GC included) of the same pair: what load hardly moves; a build that
			// uses both cores can be within its wall goal at a higher CPU ratio.
			if cpu, ok := r.get(name, "build/read-cpu"); ok {
				out = append(out, row{"index build CPU vs column read CPU", what, "same run", fmt.Sprintf("%.2f×", cpu), "—"})
			}
		}
	}
	for _, name := range names {
		if v, ok := r.get(name, "scan/index"); ok {
			us, _ := r.get(name, "lookup-us")
			ms, _ := r.get(name, "scan-ms")
			out = append(out, row{"point lookup vs full scan", fmt.Sprintf("%.0f µs  %s", us, strings.TrimPrefix(name, "PointLookup/")),
				fmt.Sprintf("%.0f ms scan", ms), fmt.Sprintf("%.0f× faster", v), "≥ 100×"})
		}
	}
	published := map[string]float64{"name=42/perOwner=1": 505, "name=42/perOwner=64": 159, "name=256/perOwner=1": 713, "name=256/perOwner=64": 367}
	for _, shape := range []string{"name=42/perOwner=1", "name=42/perOwner=64", "name=256/perOwner=1", "name=256/perOwner=64"} {
		if v, ok := r.get("TicketMemory/"+shape, "B/ticket"); ok {
			out = append(out, row{"ledger bytes per ticket", fmt.Sprintf("%.0f B  %s", v, shape), fmt.Sprintf("%.0f B published", published[shape]),
				fmt.Sprintf("%.2f×", v/published[shape]), "< 1×"})
		}
	}
	for _, size := range []string{"1MiB", "128MiB"} {
		if v, ok := r.get("UploadPath/size="+size, "added%"); ok {
			put, _ := r.get("UploadPath/size="+size, "put-µs")
			led, _ := r.get("UploadPath/size="+size, "ledger-µs")
			out = append(out, row{"ledger on the upload path (" + size + ")", fmt.Sprintf("%.0f µs reserve+put+accept", led), fmt.Sprintf("%.0f µs put", put), fmt.Sprintf("%+.1f%%", v), "≤ +1%"})
			// The physical share of it (issue #15 item 5): the same journal commit beside a plain
			// put, without the guard that makes the put wait for it — what the shared disk costs.
			if disk, ok := r.get("UploadPath/size="+size, "disk-µs"); ok && put > 0 {
				out = append(out, row{"journal disk cost to a put (" + size + ")", fmt.Sprintf("%.0f µs added by an unguarded commit beside it", disk),
					fmt.Sprintf("%.0f µs put", put), fmt.Sprintf("%+.1f%%", 100*disk/put), "—"})
				// What is left of added% once the shared disk's share is taken out: the ledger's
				// own cost on the upload path (the guard, its goroutines, the accept).
				if added, ok := r.get("UploadPath/size="+size, "added-µs"); ok {
					out = append(out, row{"ledger on the upload path net of the disk (" + size + ")", fmt.Sprintf("%.0f µs added − %.0f µs disk", added, disk),
						fmt.Sprintf("%.0f µs put", put), fmt.Sprintf("%+.1f%%", 100*(added-disk)/put), "≤ +1%"})
				}
			}
		}
	}
	if busy, ok := r.get("JournalCommit/disk=minio-writing", "commit-µs"); ok {
		if idle, ok := r.get("JournalCommit/disk=idle", "commit-µs"); ok && idle > 0 {
			out = append(out, row{"durable reservation, median", fmt.Sprintf("%.0f µs with MinIO writing", busy), fmt.Sprintf("%.0f µs disk idle", idle),
				fmt.Sprintf("%.2f×", busy/idle), "—"})
		}
	}
	out = append(out, r.lance(names)...)
	out = append(out, r.segments(names)...)
	out = append(out, r.jobLifecycle()...)
	// Staging a 90 MB object on the local store (storage BenchmarkStage90MB): direct I/O past the
	// first window against the page cache, alternated; machine-wide CPU (writeback threads too).
	if d, ok := r.get("Stage90MB", "direct-cpu-ms"); ok {
		if p, ok := r.get("Stage90MB", "buffered-cpu-ms"); ok && p > 0 {
			dw, _ := r.get("Stage90MB", "direct-ms")
			pw, _ := r.get("Stage90MB", "buffered-ms")
			out = append(out, row{"local put of 90 MB, machine CPU", fmt.Sprintf("%.0f ms CPU (%.0f ms wall)  direct I/O", d, dw),
				fmt.Sprintf("%.0f ms CPU (%.0f ms wall) page cache", p, pw), fmt.Sprintf("%.2f×", d/p), "< 1×"})
		}
	}
	// Issue 44 item 8: 1 GiB read in ranges through an invocation's storage gateway against the
	// sidecar's own client on the store, alternated ABBA (storage/gateway BenchmarkGatewayScan).
	for _, st := range []string{"local", "minio"} {
		if v, ok := r.get("GatewayScan/"+st, "gateway/direct"); ok {
			g, _ := r.get("GatewayScan/"+st, "gateway-MB/s")
			d, _ := r.get("GatewayScan/"+st, "direct-MB/s")
			out = append(out, row{"1 GiB scan through the gateway (" + st + ")", fmt.Sprintf("%.0f MB/s through the gateway", g),
				fmt.Sprintf("%.0f MB/s direct", d), fmt.Sprintf("%.2f×", v), "≥ 0.8×"})
		}
		// The same scan against a bare loopback server of the store: the hop's floor, the
		// gateway's own cost (PERFORMANCE.md §4.1).
		if v, ok := r.get("GatewayScan/"+st, "gateway/floor"); ok {
			g, _ := r.get("GatewayScan/"+st, "gateway-MB/s")
			f, _ := r.get("GatewayScan/"+st, "floor-MB/s")
			out = append(out, row{"1 GiB scan, gateway / bare loopback server (" + st + ")", fmt.Sprintf("%.0f MB/s through the gateway", g),
				fmt.Sprintf("%.0f MB/s bare server", f), fmt.Sprintf("%.2f×", v), "≥ 0.9×"})
		}
	}
	if v, ok := r.get("CleanupThroughput", "ratio"); ok {
		raw, _ := r.get("CleanupThroughput", "raw-obj/s")
		led, _ := r.get("CleanupThroughput", "ledger-obj/s")
		out = append(out, row{"cleanup throughput", fmt.Sprintf("%.0f obj/s via ledger", led), fmt.Sprintf("%.0f obj/s RemoveObjects", raw), fmt.Sprintf("%.2f×", v), "≥ 0.95×"})
	}
	return out
}

// lance reads the Lance engine's benchmarks (issue #12 item 8), each a ratio of two processes
// measured in the same iteration: internal/testing/enginetest BenchmarkLanceBuild (the engine under the
// harness vs a bare pylance build) and sidecar BenchmarkLanceSidecar (a build and a no-op mutation,
// local and on MinIO, through the real sidecar vs a bare pylance build and a bare engine start).
func (r results) lance(names []string) []row {
	var out []row
	for _, name := range names {
		if v, ok := r.get(name, "engine/bare"); ok && strings.HasPrefix(name, "LanceBuild/") {
			e, _ := r.get(name, "engine-s")
			b, _ := r.get(name, "bare-s")
			em, _ := r.get(name, "engine-MiB")
			bm, _ := r.get(name, "bare-MiB")
			ec, _ := r.get(name, "engine-cpu-s")
			bc, _ := r.get(name, "bare-cpu-s")
			out = append(out, row{"Lance build, engine vs bare pylance", fmt.Sprintf("%.2f s (peak %.0f MiB)  %s", e, em, strings.TrimPrefix(name, "LanceBuild/")),
				fmt.Sprintf("%.2f s bare (peak %.0f MiB)", b, bm), fmt.Sprintf("%.2f×", v), "≤ 1.10×"})
			// The same pair in CPU time, which a loaded machine hardly moves (the wall can swing 2x).
			if bc > 0 {
				out = append(out, row{"Lance build CPU, engine vs bare", fmt.Sprintf("%.2f s CPU  %s", ec, strings.TrimPrefix(name, "LanceBuild/")),
					fmt.Sprintf("%.2f s CPU bare", bc), fmt.Sprintf("%.2f×", ec/bc), "≤ 1.10×"})
			}
		}
	}
	// Issue 43's goals: a build through the sidecar (a prestarted engine) against a bare pylance
	// process, on each store, and a no-op mutation against a bare engine start.
	for _, name := range names {
		v, ok := r.get(name, "sidecar/bare")
		what, store := "", ""
		switch {
		case !ok:
			continue
		case strings.HasPrefix(name, "LanceSidecar/build/"):
			what, store = strings.TrimPrefix(name, "LanceSidecar/build/"), "local"
		case strings.HasPrefix(name, "LanceSidecar/build-minio/"):
			what, store = strings.TrimPrefix(name, "LanceSidecar/build-minio/"), "MinIO"
		default:
			continue
		}
		s, _ := r.get(name, "sidecar-s")
		b, _ := r.get(name, "bare-s")
		goal := "≤ 1.0×"
		if strings.HasPrefix(what, "IVF_PQ") {
			goal = "≤ 1.05×"
		}
		out = append(out, row{"Lance build through the sidecar (" + store + ")", fmt.Sprintf("%.2f s  %s", s, what),
			fmt.Sprintf("%.2f s bare pylance process", b), fmt.Sprintf("%.2f×", v), goal})
	}
	for _, c := range []struct{ name, store string }{{"LanceSidecar/noop", "local"}, {"LanceSidecar/noop-minio", "MinIO"}} {
		if v, ok := r.get(c.name, "noop/start"); ok {
			n, _ := r.get(c.name, "noop-s")
			s, _ := r.get(c.name, "start-s")
			out = append(out, row{"no-op Lance mutation vs engine start (" + c.store + ")", fmt.Sprintf("%.0f ms round trip", n*1000),
				fmt.Sprintf("%.0f ms python+import lance+open", s*1000), fmt.Sprintf("%.2f×", v), "≤ 0.3×"})
		}
		if m, ok := r.get(c.name, "idle-MiB"); ok {
			out = append(out, row{"idle prestarted Lance engine (" + c.store + ")", fmt.Sprintf("%.0f MiB  idle_memory_bytes in hello", m),
				"—", "—", "reported"})
		}
	}
	if v, ok := r.get("LanceDispatch", "dispatch/bare"); ok {
		d, _ := r.get("LanceDispatch", "dispatch-jobs/s")
		b, _ := r.get("LanceDispatch", "bare-jobs/s")
		out = append(out, row{"100 small Lance mutations through host/dispatch", fmt.Sprintf("%.2f jobs/s", d),
			fmt.Sprintf("%.2f jobs/s bare pylance, one after another", b), fmt.Sprintf("%.2f×", v), "≥ 2×"})
		// What bounds that ratio: the CPU a job costs the machine, and the ceiling it sets.
		if cpu, ok := r.get("LanceDispatch", "dispatch-cpu-ms/job"); ok {
			eng, _ := r.get("LanceDispatch", "engine-cpu-ms/job")
			idle, _ := r.get("LanceDispatch", "dispatch-idle-share")
			bare, _ := r.get("LanceDispatch", "bare-cpu-ms/job")
			ceil, _ := r.get("LanceDispatch", "cpu-ceiling")
			out = append(out, row{"  its CPU per job, whole machine", fmt.Sprintf("%.0f ms (engine %.0f ms; %.0f%% idle)", cpu, eng, idle*100),
				fmt.Sprintf("%.0f ms bare process", bare), fmt.Sprintf("%.2f×", cpu/bare), "—"})
			out = append(out, row{"  the ratio's CPU ceiling", "CPUs × bare wall/job ÷ CPU/job", "—", fmt.Sprintf("%.2f×", ceil), "—"})
		}
	}
	return out
}

// segments reads sidecar BenchmarkLanceSegments (issue #45): the memory wall (a single IVF_PQ
// build OOM-killed under the wall, the same index as segments each under it, recall against a
// single build with 1 GiB) and the wall of a segmented job with two workers against one.
func (r results) segments(names []string) []row {
	var out []row
	const wall = "LanceSegments/memory-wall/IVF_PQ-400k"
	if loss, ok := r.get(wall, "recall-loss"); ok {
		oom, _ := r.get(wall, "single-oom")
		peak, _ := r.get(wall, "segment-peak-MiB")
		rs, _ := r.get(wall, "recall-segmented")
		r1, _ := r.get(wall, "recall-single")
		mib, ok := r.get(wall, "wall-MiB")
		if !ok {
			mib = 256 // the wall before the benchmark reported it
		}
		trained := ""
		if t, ok := r.get(wall, "train-peak-MiB"); ok {
			trained = fmt.Sprintf(", TRAIN %.0f MiB (given 1 GiB)", t)
		}
		out = append(out, row{fmt.Sprintf("segmented IVF_PQ under %.0f MiB, recall loss", mib),
			fmt.Sprintf("recall@10 %.3f, peak %.0f MiB/segment%s (single build under %.0f MiB OOM-killed: %s)", rs, peak, trained, mib,
				map[bool]string{true: "yes", false: "NO"}[oom == 1]), fmt.Sprintf("%.3f single build, 1 GiB", r1),
			fmt.Sprintf("%+.3f", loss), "≤ 0.02"})
	}
	for _, name := range names {
		if v, ok := r.get(name, "2-workers/1-worker"); ok && strings.HasPrefix(name, "LanceSegments/parallel/") {
			two, _ := r.get(name, "2-workers-s")
			one, _ := r.get(name, "1-worker-s")
			bare, _ := r.get(name, "bare-s")
			out = append(out, row{"segmented build, 2 workers vs 1", fmt.Sprintf("%.2f s  %s", two, strings.TrimPrefix(name, "LanceSegments/parallel/")),
				fmt.Sprintf("%.2f s one worker", one), fmt.Sprintf("%.2f× faster", 1/v), "≥ 1.6× faster"})
			if bare > 0 {
				out = append(out, row{"segmented build (2 workers) vs bare create_index", fmt.Sprintf("%.2f s  %s", two, strings.TrimPrefix(name, "LanceSegments/parallel/")),
					fmt.Sprintf("%.2f s bare pylance", bare), fmt.Sprintf("%.2f×", two/bare), ""})
			}
		}
	}
	return out
}

// jobLifecycle compares BenchmarkJobLifecycle's etcd run with its bbolt run (host/dispatch, the
// same run): jobs driven to COMMITTED per second, and write transactions per job (on etcd each is
// one write round trip; the goal is no more than bbolt's).
func (r results) jobLifecycle() []row {
	etcd, ok1 := r.get("JobLifecycle/etcd", "jobs/s")
	bolt, ok2 := r.get("JobLifecycle/bolt", "jobs/s")
	if !ok1 || !ok2 || bolt == 0 {
		return nil
	}
	out := []row{{"job lifecycle, no-op jobs", fmt.Sprintf("%.0f jobs/s  etcd (3 members)", etcd), fmt.Sprintf("%.0f jobs/s  bbolt", bolt),
		fmt.Sprintf("%.2f×", etcd/bolt), "—"}}
	ew, ok1 := r.get("JobLifecycle/etcd", "writes/job")
	bw, ok2 := r.get("JobLifecycle/bolt", "writes/job")
	if ok1 && ok2 && bw > 0 {
		out = append(out, row{"journal writes per job", fmt.Sprintf("%.2f  etcd transactions", ew), fmt.Sprintf("%.2f  bbolt transactions", bw),
			fmt.Sprintf("%.2f×", ew/bw), "≤ 1×"})
	}
	return out
}

func main() {
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	rows, n := medianRows(parseRounds(sc))
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results on stdin")
		os.Exit(1)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	head := "RATIO"
	if n > 1 {
		head = fmt.Sprintf("RATIO (median of %d rounds)", n)
	}
	fmt.Fprintf(tw, "HEADLINE\tFIGURE\tBASELINE (same run)\t%s\tGOAL\tVERDICT\n", head)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.headline, r.figure, r.baseline, r.ratio, r.goal, verdict(r.ratio, r.goal))
	}
	tw.Flush()
}

// parseRounds splits concatenated benchmark output into rounds: a benchmark seen again starts
// the next round (`make bench BENCH_ROUNDS=N` runs the whole suite N times, interleaved, so
// each round's figures share their baseline's conditions).
func parseRounds(sc *bufio.Scanner) []results {
	var rounds []results
	cur := results{}
	for sc.Scan() {
		name, metrics, ok := parseLine(sc.Text())
		if !ok {
			continue
		}
		if _, seen := cur[name]; seen {
			rounds, cur = append(rounds, cur), results{}
		}
		cur[name] = metrics
	}
	if len(cur) > 0 {
		rounds = append(rounds, cur)
	}
	return rounds
}

// medianRows computes each round's rows and keeps, for every row, the round whose ratio is the
// median (rows are matched by headline and position; the figure shown is that round's).
func medianRows(rounds []results) ([]row, int) {
	if len(rounds) == 0 {
		return nil, 0
	}
	type key struct {
		headline string
		nth      int
	}
	by := map[key][]row{}
	var order []key
	for _, rd := range rounds {
		seen := map[string]int{}
		for _, r := range rd.rows() {
			k := key{r.headline, seen[r.headline]}
			seen[r.headline]++
			if _, ok := by[k]; !ok {
				order = append(order, k)
			}
			by[k] = append(by[k], r)
		}
	}
	out := make([]row, 0, len(order))
	for _, k := range order {
		rs := by[k]
		sort.SliceStable(rs, func(i, j int) bool {
			a, _ := number(rs[i].ratio)
			b, _ := number(rs[j].ratio)
			return a < b
		})
		out = append(out, rs[len(rs)/2])
	}
	return out, len(rounds)
}

var numberRE = regexp.MustCompile(`[-+]?[0-9]+(\.[0-9]+)?`)

// number reads the first number of a ratio or goal cell ("1.26×", "+3.3%", "143× faster").
func number(s string) (float64, bool) {
	m := numberRE.FindString(s)
	if m == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(m, 64)
	return v, err == nil
}

// verdict compares a ratio with its goal ("≤ 1.5×", "≥ 100×", "≤ +1%", "< 1×"): "ok", "MISS",
// or "" when the goal is not a bound ("—").
func verdict(ratio, goal string) string {
	v, ok1 := number(ratio)
	g, ok2 := number(goal)
	if !ok1 || !ok2 {
		return ""
	}
	var met bool
	switch {
	case strings.HasPrefix(goal, "≤"):
		met = v <= g
	case strings.HasPrefix(goal, "≥"):
		met = v >= g
	case strings.HasPrefix(goal, "<"):
		met = v < g
	case strings.HasPrefix(goal, ">"):
		met = v > g
	default:
		return ""
	}
	if met {
		return "ok"
	}
	return "MISS"
}
