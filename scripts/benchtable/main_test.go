package main

import (
	"bufio"
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
BenchmarkJobLifecycle/etcd-2         	     300	   5031935 ns/op	       198.7 jobs/s	         3.000 writes/job
`
	rows := parse(bufio.NewScanner(strings.NewReader(in))).rows()
	want := map[string]string{
		"RPC overhead (stdio, 1 in flight)": "1.26×",
		"no-op mutation round trip":         "0.81×",
		"ledger bytes per ticket":           "0.49×",
		"cleanup throughput":                "1.00×",
		"job lifecycle, no-op jobs":         "0.54×",
		"journal writes per job":            "1.00×",
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
