package main

import (
	"bufio"
	"strconv"
	"strings"
	"testing"
)

func TestRowsFromBenchOutput(t *testing.T) {
	in := `goos: linux
BenchmarkRoundTrip/stdio/raw-echo/inflight=1-2   	   25785	     92746 ns/op	    5314 B/op
BenchmarkRoundTrip/stdio/steward-hello/inflight=1-2	   22402	    116805 ns/op
BenchmarkMutateNoop/isolation-launch-baseline-2  100  11552595 ns/op
BenchmarkMutateNoop/sidecar-noop-mutation-2      100   9318613 ns/op
BenchmarkTicketMemory/name=42/perOwner=1-2  1  100 ns/op  248.0 B/ticket
BenchmarkCleanupThroughput-2  1  5 ns/op  4372 raw-obj/s  4354 ledger-obj/s  0.996 ratio
BenchmarkJobLifecycle/bolt-2         	     300	   2717245 ns/op	       368.0 jobs/s	         3.000 writes/job
BenchmarkLanceBuild/IVF_PQ-100k-2  1  84000000000 ns/op  120.0 bare-MiB  20.0 bare-s  110.0 engine-MiB  22.0 engine-s  1.100 engine/bare  30.0 engine-cpu-s  32.0 bare-cpu-s
BenchmarkLanceSidecar/noop-2  1  1903564374 ns/op  0.5078 noop-s  1.145 noop/start  0.4435 start-s  98.5 idle-MiB
BenchmarkLanceSidecar/noop-minio-2  1  903564374 ns/op  0.0451 noop-s  0.1250 noop/start  0.3608 start-s
BenchmarkLanceSidecar/build/BTREE-1M-2  1  8459245051 ns/op  1.707 bare-s  2.515 sidecar-s  1.474 sidecar/bare
BenchmarkLanceSidecar/build-minio/IVF_PQ-100k-2  1  8459245051 ns/op  20.0 bare-s  20.8 sidecar-s  1.04 sidecar/bare
BenchmarkLaunchNoop/namespace-floor-2  200  4727668 ns/op  1.641 namespace-excess-ms  3118887 namespaced-p50-ns  1477507 plain-p50-ns
BenchmarkLanceDispatch-2  1  8459245051 ns/op  2.0 bare-jobs/s  4.6 dispatch-jobs/s  2.3 dispatch/bare  300 dispatch-cpu-ms/job  260 engine-cpu-ms/job  400 bare-cpu-ms/job  500 bare-wall-ms/job  0.02 dispatch-idle-share  3.333 cpu-ceiling
BenchmarkLanceSegments/memory-wall/IVF_PQ-400k-2  1  90000000000 ns/op  256.0 wall-MiB  1.000 single-oom  256.0 single-peak-MiB  230.0 segment-peak-MiB  270.0 train-peak-MiB  0.1800 recall-segmented  0.1900 recall-single  0.0100 recall-loss
BenchmarkJobLifecycle/etcd-2         	     300	   5031935 ns/op	       198.7 jobs/s	         3.000 writes/job
BenchmarkGatewayScan/local-2         	       1	4508943577 ns/op	      1472 direct-MB/s	       704.1 gateway-MB/s	       683.1 floor-MB/s	         0.4784 gateway/direct	         1.031 gateway/floor
`
	rows := parse(bufio.NewScanner(strings.NewReader(in))).rows()
	want := map[string]string{
		"RPC overhead (stdio, 1 in flight)":                      "1.26×",
		"no-op mutation round trip":                              "0.81×",
		"ledger bytes per ticket":                                "0.49×",
		"cleanup throughput":                                     "1.00×",
		"job lifecycle, no-op jobs":                              "0.54×",
		"journal writes per job":                                 "1.00×",
		"Lance build, engine vs bare pylance":                    "1.10×",
		"Lance build CPU, engine vs bare":                        "0.94×",
		"Lance build through the sidecar (local)":                "1.47×",
		"Lance build through the sidecar (MinIO)":                "1.04×",
		"no-op Lance mutation vs engine start (local)":           "1.15×",
		"no-op Lance mutation vs engine start (MinIO)":           "0.12×",
		"idle prestarted Lance engine (local)":                   "—",
		"100 small Lance mutations through host/dispatch":        "2.30×",
		"  its CPU per job, whole machine":                       "0.75×",
		"segmented IVF_PQ under 256 MiB, recall loss":            "+0.010",
		"  its kernel floor: the domain's namespaces alone, p50": "+1.64 ms",
		"  the ratio's CPU ceiling":                              "3.33×",
		"1 GiB scan through the gateway (local)":                 "0.48×",
		"1 GiB scan, gateway / bare loopback server (local)":     "1.03×",
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r.headline] = r.ratio
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: ratio %q, want %q", k, got[k], v)
		}
	}
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
}

func TestVerdicts(t *testing.T) {
	for _, tc := range []struct{ ratio, goal, want string }{
		{"1.26×", "≤ 1.2×", "MISS"}, {"0.81×", "≤ 1.3×", "ok"}, {"143× faster", "≥ 100×", "ok"},
		{"+3.3%", "≤ +1%", "MISS"}, {"+0.2%", "≤ +1%", "ok"}, {"0.49×", "< 1×", "ok"}, {"0.54×", "—", ""},
	} {
		if got := verdict(tc.ratio, tc.goal); got != tc.want {
			t.Errorf("verdict(%q, %q) = %q, want %q", tc.ratio, tc.goal, got, tc.want)
		}
	}
}

// TestMedianOfRounds: the same benchmarks three times make three rounds; each row keeps the
// round with the median ratio, computed within its round.
func TestMedianOfRounds(t *testing.T) {
	round := func(hello, raw int) string {
		return "BenchmarkRoundTrip/stdio/raw-echo/inflight=1-2  100  " + strconv.Itoa(raw) + " ns/op\n" +
			"BenchmarkRoundTrip/stdio/steward-hello/inflight=1-2  100  " + strconv.Itoa(hello) + " ns/op\n"
	}
	in := round(300, 100) + round(110, 100) + round(150, 100) // ratios 3.0, 1.1, 1.5 → median 1.5
	rows, n := medianRows(parseRounds(bufio.NewScanner(strings.NewReader(in))))
	if n != 3 || len(rows) != 1 || rows[0].ratio != "1.50×" {
		t.Fatalf("%d rounds, rows %+v", n, rows)
	}
}

// TestIssueGoals: the rows of issue #15 carry its goals — the sorted int64 build ≤ 1.5×, every
// other build ≤ 2×, each build's peak heap against the 256 MiB budget, the no-op mutation
// against the static fork+exec floor (started after the same pause, and back to back), the
// kill ladder ≤ 1.2×, the isolated launch ≤ 1.25× of raw ForkExec alternated with it (the
// separate runs shown without a goal) — and their verdicts follow.
func TestIssueGoals(t *testing.T) {
	in := `BenchmarkLaunchNoop/static-floor-2  200  2000000 ns/op
BenchmarkLaunchNoop/static-floor-spaced-2  200  3125000 ns/op
BenchmarkLaunchNoop/raw-forkexec-2  200  4000000 ns/op
BenchmarkLaunchNoop/isolated-hybrid-2  200  6000000 ns/op
BenchmarkLaunchNoop/paired-hybrid-2  200  9000000 ns/op  4800000 isolated-ns  4000000 raw-ns  1.2 isolated/raw
BenchmarkKillTree50/ladder-v1-2  30  11000000 ns/op
BenchmarkKillTree50/bare-v1-2  30  10000000 ns/op
BenchmarkMutateNoop/sidecar-noop-mutation-prestarted-2  100  5000000 ns/op
BenchmarkIndexBuild/local/btree-id-2  1  1 ns/op  1.0 read-s  1.6 build-s  1.6 build/read  120 peak-heap-MB
BenchmarkIndexBuild/local/btree-name-2  1  1 ns/op  1.0 read-s  1.9 build-s  1.9 build/read  300 peak-heap-MB
BenchmarkIndexBuild/minio/btree-name-2  1  1 ns/op  2.0 read-s  5.0 build-s  2.5 build/read  300 peak-heap-MB  2.2 put-s  2.1 read+put/read  3.0 build-cpu-s  6.0 build-server-cpu-s  0.9 build-busy
BenchmarkCleanupThroughput-2  1  5 ns/op  1000 raw-obj/s  930 ledger-obj/s  0.93 ratio
BenchmarkStage90MB-2  20  1 ns/op  80 buffered-cpu-ms  90 buffered-ms  24 direct-cpu-ms  55 direct-ms
BenchmarkUploadPath/size=1MiB-2  200  1 ns/op  900 disk-µs  10000 put-µs  11000 ledger-µs  1000 added-µs  10.0 added%
`
	rows := parse(bufio.NewScanner(strings.NewReader(in))).rows()
	type want struct{ ratio, goal, verdict string }
	wants := []struct {
		headline, figure string
		want
	}{
		{"isolation launch overhead", "paired-hybrid", want{"1.20×", "≤ 1.25×", "ok"}},
		{"isolation launch overhead, separate runs", "isolated-hybrid", want{"1.50×", "—", ""}},
		{"kill+reap of 50 processes", "ladder-v1", want{"1.10×", "≤ 1.2×", "ok"}},
		{"no-op mutation vs static floor", "sidecar-noop-mutation-prestarted", want{"2.50×", "≤ 2×", "MISS"}},
		{"no-op mutation vs static floor, both spaced", "sidecar-noop-mutation-prestarted", want{"1.60×", "≤ 2×", "ok"}},
		{"static floor spaced vs back to back", "static-floor-spaced", want{"1.56×", "—", ""}},
		{"index build vs column read", "local/btree-id", want{"1.60×", "≤ 1.5×", "MISS"}},
		{"index build vs column read", "local/btree-name", want{"1.90×", "≤ 2×", "ok"}},
		{"index build vs column read", "minio/btree-name", want{"2.50×", "≤ 2×", "MISS"}},
		{"column read + segment put vs column read", "minio/btree-name", want{"2.10×", "—", ""}},
		{"index build vs column read + segment put", "minio/btree-name", want{"1.19×", "—", ""}},
		{"index build, CPUs busy (build + store server)", "3.00 + 6.00 s CPU  minio/btree-name", want{"0.90×", "—", ""}},
		{"index build peak heap", "local/btree-id", want{"0.47×", "≤ 1×", "ok"}},
		{"index build peak heap", "local/btree-name", want{"1.17×", "≤ 1×", "MISS"}},
		{"cleanup throughput", "via ledger", want{"0.93×", "≥ 0.95×", "MISS"}},
		{"local put of 90 MB, machine CPU", "direct I/O", want{"0.30×", "< 1×", "ok"}},
		{"ledger on the upload path (1MiB)", "reserve+put+accept", want{"+10.0%", "≤ +1%", "MISS"}},
		{"journal disk cost to a put (1MiB)", "unguarded commit", want{"+9.0%", "—", ""}},
		{"ledger on the upload path net of the disk (1MiB)", "1000 µs added − 900 µs disk", want{"+1.0%", "≤ +1%", "ok"}},
	}
	for _, w := range wants {
		found := false
		for _, r := range rows {
			if r.headline != w.headline || !strings.Contains(r.figure, w.figure) {
				continue
			}
			found = true
			if got := (want{r.ratio, r.goal, verdict(r.ratio, r.goal)}); got != w.want {
				t.Errorf("%s %s: %+v, want %+v", w.headline, w.figure, got, w.want)
			}
		}
		if !found {
			t.Errorf("no row %q for %s in %+v", w.headline, w.figure, rows)
		}
	}
	for _, r := range rows { // a local build has no server beside it
		if strings.HasPrefix(r.headline, "index build, CPUs busy") && strings.Contains(r.figure, "local/") {
			t.Errorf("a CPUs-busy row for a local build: %+v", r)
		}
	}
}
