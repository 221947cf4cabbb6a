package sidecar_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
)

// BenchmarkLanceSegments: segment builds through the real sidecar and Lance (PROTOCOL.md §3.13),
// on hard-linked copies of cached multi-fragment datasets. Run with -benchtime 1x; make bench
// repeats rounds.
//
//   - memory-wall/IVF_PQ-400k: 400,000 × 128 in 8 fragments. One CREATE under a 256 MiB worker
//     limit (OOM-killed: the wall), the same index built as 8 segments each under 256 MiB, and
//     one CREATE with 1 GiB (the baseline); recall@10 of both indexes over 50 queries against an
//     exact scan (lancectl recall, nprobes 16). Reports the wall, single-oom (1: the single build
//     was OOM-killed), the worst segment's peak, TRAIN's peak, and the recall difference. TRAIN
//     runs with 1 GiB: it trains on a sample of a fixed size whatever the dataset's (256 × 2^8
//     vectors for PQ), peaking at 248 MiB in a bare process and at 220 to over 288 MiB through
//     the gateway: OOM-killed in 3 of 7 rounds under a wall of 256 or 288 MiB (docs/PERFORMANCE.md
//     §7). The wall is what a dataset too big for one worker meets; its segments scale with it.
//   - parallel/<case>: the same segmented job (TRAIN for IVF_PQ, 2 SEGMENTs, COMMIT_SEGMENTS)
//     with its two segments sent together (2 executors) against one after the other, ABBA; and
//     the two-worker job against one bare pylance create_index of the whole index. BTREE runs
//     over 20M rows: a bare build of 1M takes ~0.2 s, no more than an invocation's own costs;
//     20M takes 2.6 s bare and its cached dataset 85 s to generate (400 MB; 40M would take ~3
//     minutes). K is 2, one segment per executor (why not 4: docs/PERFORMANCE.md §7).
func BenchmarkLanceSegments(b *testing.B) {
	testenv.NeedRoot(b)
	l := newLanceSidecar(b, false, "--worker-memory", "1073741824", "--executors", "2")
	// A linked copy of a cached dataset per build: the contained engine writes only new files.
	fresh := func(src string) string {
		path := randID("seg-")
		if err := enginetest.LinkCopy(src, filepath.Join(l.root, path)); err != nil {
			b.Fatal(err)
		}
		testenv.GuestOwn(b, filepath.Join(l.root, path))
		return path
	}
	ivf := map[string]string{"num_partitions": "64", "num_sub_vectors": "16"}
	const wall, trainMemory = 256 << 20, 1 << 30
	// A build of 200,000 vectors takes longer than the tests' one-minute mutate.
	mutate := func(p rpc.MutateParams) rpc.MutateResult {
		p.DeadlineUnixMs = time.Now().Add(10 * time.Minute).UnixMilli()
		res, err := l.c.Mutate(context.Background(), p)
		if err != nil {
			b.Fatalf("mutate %s: %v", p.InvocationID, err)
		}
		return res
	}

	b.Run("memory-wall/IVF_PQ-400k", func(b *testing.B) {
		l.t = b
		src, err := enginetest.CachedLanceFragments(l.python, l.dir, 400_000, 128, 8)
		if err != nil {
			b.Fatal(err)
		}
		const pinned = 8
		for i := 0; i < b.N; i++ {
			single := fresh(src)
			p := l.lanceParams(randID("inv-"), single, pinned, rpc.OpCreate, "idx", "vec", "IVF_PQ", ivf)
			p.Limits = &rpc.WorkerLimits{MemoryBytes: wall}
			oom := mutate(p)
			if oom.Phase == rpc.PhaseIndeterminate {
				l.resolveLance(p.InvocationID, single, pinned)
			}
			segmented := fresh(src)
			start := time.Now()
			job, err := l.segmentJob(segmented, pinned, 8, false, "vec", "IVF_PQ", ivf, wall, trainMemory)
			if err != nil {
				b.Fatal(err)
			}
			segWall := time.Since(start)
			single = fresh(src)
			full := l.lanceParams(randID("inv-"), single, pinned, rpc.OpCreate, "idx", "vec", "IVF_PQ", ivf)
			start = time.Now()
			if res := mutate(full); res.CommittedVersion != pinned+1 {
				b.Fatalf("single build with 1 GiB: %+v", res)
			}
			singleWall := time.Since(start)
			var rs, r1 struct {
				Recall float64 `json:"recall"`
			}
			l.ctl(&rs, "recall", l.uri(segmented), "vec")
			l.ctl(&r1, "recall", l.uri(single), "vec")
			b.ReportMetric(wall>>20, "wall-MiB")
			b.ReportMetric(map[bool]float64{true: 1}[oom.OOMKilled], "single-oom")
			b.ReportMetric(float64(oom.PeakMemoryBytes>>20), "single-peak-MiB")
			b.ReportMetric(float64(job.peak>>20), "segment-peak-MiB")
			b.ReportMetric(float64(job.trainPeak>>20), "train-peak-MiB")
			b.ReportMetric(segWall.Seconds(), "segmented-s")
			b.ReportMetric(singleWall.Seconds(), "single-1GiB-s")
			b.ReportMetric(rs.Recall, "recall-segmented")
			b.ReportMetric(r1.Recall, "recall-single")
			b.ReportMetric(r1.Recall-rs.Recall, "recall-loss")
		}
	})

	type parallelCase struct {
		name, typ, column string
		params            map[string]string
		rows, dim         int
	}
	for _, m := range []parallelCase{{"BTREE-20M", "BTREE", "id", nil, 20_000_000, 0}, {"IVF_PQ-200k", "IVF_PQ", "vec", ivf, 200_000, 128}} {
		b.Run("parallel/"+m.name, func(b *testing.B) {
			l.t = b
			src, err := enginetest.CachedLanceFragments(l.python, l.dir, m.rows, m.dim, 8)
			if err != nil {
				b.Fatal(err)
			}
			job := func(parallel bool) func() (time.Duration, error) {
				return func() (time.Duration, error) {
					start := time.Now()
					_, err := l.segmentJob(fresh(src), 8, 2, parallel, m.column, m.typ, m.params, 0, 0)
					return time.Since(start), err
				}
			}
			enginetest.BenchABBA(b, "2-workers", "1-worker", job(true), job(false))
			var bare time.Duration
			for i := 0; i < b.N; i++ {
				r, err := enginetest.BareBuild(context.Background(), l.python, l.dir, l.uri(fresh(src)), m.column, m.typ, "idx", m.params)
				if err != nil {
					b.Fatal(err)
				}
				bare += r.Wall
			}
			b.ReportMetric(bare.Seconds()/float64(b.N), "bare-s")
		})
	}
}

// segmentResult is what segmentJob measured.
type segmentResult struct {
	peak      int64         // the largest peak memory of its SEGMENTs and COMMIT_SEGMENTS
	trainPeak int64         // its TRAIN's peak memory
	plan      time.Duration // index.plan's round trip
	calls     []segmentCall // its invocations in the order they answered
}

// segmentCall is one invocation of a segmented job as its caller saw it.
type segmentCall struct {
	op, invocation string
	wall           time.Duration // the index.mutate round trip
}

// segmentJob builds index "idx" on path as k segments (a TRAIN first for vector types, under
// trainMemory bytes), sent one after another or all at once, each under memory bytes, and
// commits them at pinned+1 (0: the sidecar's limit).
func (l *lanceSidecar) segmentJob(path string, pinned int64, k int, parallel bool, column, typ string, params map[string]string, memory, trainMemory int64) (segmentResult, error) {
	var out segmentResult
	var mu sync.Mutex
	run := func(p rpc.MutateParams, want string) (rpc.MutateResult, error) {
		limit := memory
		if p.Op == rpc.OpTrain {
			limit = trainMemory
		}
		if limit > 0 {
			p.Limits = &rpc.WorkerLimits{MemoryBytes: limit}
		}
		p.DeadlineUnixMs = time.Now().Add(10 * time.Minute).UnixMilli()
		start := time.Now()
		res, err := l.c.Mutate(context.Background(), p)
		wall := time.Since(start)
		if err == nil && res.CompletionReason != want {
			err = fmt.Errorf("%s %s: %+v", p.Op, p.InvocationID, res)
		}
		mu.Lock()
		if p.Op == rpc.OpTrain {
			out.trainPeak = res.PeakMemoryBytes
		} else {
			out.peak = max(out.peak, res.PeakMemoryBytes)
		}
		out.calls = append(out.calls, segmentCall{p.Op, p.InvocationID, wall})
		mu.Unlock()
		return res, err
	}
	build := randID("b-")
	var train string
	if typ == "IVF_PQ" || typ == "IVF_HNSW_SQ" {
		res, err := run(l.segParams(rpc.OpTrain, build, path, pinned, "idx", column, typ, params), rpc.CompletionTrained)
		if err != nil {
			return out, err
		}
		train = res.IndexUUID
	}
	var plan rpc.PlanResult
	start := time.Now()
	err := l.c.Call(context.Background(), rpc.MethodIndexPlan, rpc.PlanParams{Dataset: rpc.DatasetRef{Store: l.store, Path: path},
		Version: pinned, Credentials: l.creds, Segments: k}, &plan)
	out.plan = time.Since(start)
	if err != nil {
		return out, err
	}
	refs := make([]rpc.SegmentRef, len(plan.Segments))
	errs := make([]error, len(plan.Segments))
	var wg sync.WaitGroup
	for i, frags := range plan.Segments {
		one := func() {
			p := l.segParams(rpc.OpSegment, build, path, pinned, "idx", column, typ, params)
			p.Segment.FragmentIDs, p.Segment.TrainUUID = frags, train
			res, err := run(p, rpc.CompletionSegmentWritten)
			refs[i], errs[i] = rpc.SegmentRef{UUID: res.IndexUUID, FragmentIDs: frags}, err
		}
		if parallel {
			wg.Go(one)
		} else {
			one()
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, err
		}
	}
	p := l.segParams(rpc.OpCommitSegments, build, path, pinned, "idx", column, typ, params)
	p.Segment.Segments = refs
	_, err = run(p, rpc.CompletionCommitted)
	return out, err
}
