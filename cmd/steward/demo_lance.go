package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
)

// vectorAct is the demo's Lance act (issue item 6): a real Lance dataset of 128-dimensional
// vectors, an IVF_PQ build under a memory limit that OOM-kills it (classified UNKNOWN, resolved
// NOT_COMMITTED through the Lance engine's settle, its reserved folder deleted), the same build
// with enough memory (COMMITTED), and a nearest-neighbour query through the index beside a
// brute-force search, both timed by Lance's own reader.
func (d *demo) vectorAct(ctx context.Context) error {
	if d.vectors <= 0 {
		return nil
	}
	if d.lance == "" {
		d.step(6, "vectors", "skipped: %v", d.lanceErr)
		return nil
	}
	ref := rpc.DatasetRef{Store: d.ref.Store, Path: d.ref.Path + "-vectors"}
	uri, err := lanceURI(ref.Store, ref.Path)
	if err != nil {
		return err
	}
	d.step(6, "vectors", "%s rows × 128-dim float32 in a real Lance dataset (the Lance engine: pylance in its own domain)", grouped(d.vectors))
	start := time.Now()
	var created struct {
		Version int64 `json:"version"`
	}
	if err := d.lancectlJSON(ctx, &created, ref, "create", "--rows", fmt.Sprint(d.vectors)); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   written by Lance in %v: %s (version %d)\n", time.Since(start).Round(time.Millisecond), uri, created.Version)
	ivf := rpc.IndexSpec{Name: "by_vec", Columns: []string{"vec"}, Type: "IVF_PQ",
		Params: map[string]string{"num_partitions": "64", "num_sub_vectors": "16"}}
	fmt.Fprintf(d.out, "   IVF_PQ under a %s memory limit:\n", bytesIEC(d.vecOOM))
	small, err := d.vectorJob(ctx, dispatch.Request{ID: "ivf-pq-small-memory", Dataset: ref, AdmittedVersion: created.Version,
		Op: rpc.OpCreate, Index: ivf, Engine: "lance", Limits: &rpc.WorkerLimits{MemoryBytes: d.vecOOM}})
	if err != nil {
		return err
	}
	pinned := created.Version
	if small.State == dispatch.StateCommitted {
		pinned++ // with too much memory for the demo's point, the index took pinned+1 (a fence takes no version)
	}
	fmt.Fprintf(d.out, "   IVF_PQ with the sidecar's default memory limit:\n")
	if _, err := d.vectorJob(ctx, dispatch.Request{ID: "ivf-pq", Dataset: ref, AdmittedVersion: pinned,
		Op: rpc.OpCreate, Index: ivf, Engine: "lance"}); err != nil {
		return err
	}
	var chk struct {
		Listed    bool    `json:"listed"`
		UsesIndex bool    `json:"uses_index"`
		Recall    float64 `json:"recall"`
		IndexMs   float64 `json:"index_ms"`
		ScanMs    float64 `json:"scan_ms"`
	}
	if err := d.lancectlJSON(ctx, &chk, ref, "check", ivf.Name, "vec", "IVF_PQ"); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   nearest 10 neighbours, read by Lance's own library: through %s %.1f ms, brute force %.1f ms, recall %.1f (listed %v, planned %v)\n",
		ivf.Name, chk.IndexMs, chk.ScanMs, chk.Recall, chk.Listed, chk.UsesIndex)
	return nil
}

// vectorJob submits one Lance job and follows it (through index.resolve, for UNKNOWN).
func (d *demo) vectorJob(ctx context.Context, r dispatch.Request) (dispatch.Job, error) {
	if err := d.job(ctx, r); err != nil {
		return dispatch.Job{}, err
	}
	return d.disp.Get(r.ID)
}

// lancectlJSON runs lancectl on the dataset ref and decodes its JSON answer.
func (d *demo) lancectlJSON(ctx context.Context, out any, ref rpc.DatasetRef, cmd string, extra ...string) error {
	var stdout, stderr bytes.Buffer
	if err := lancectlOn(ctx, &stdout, &stderr, ref.Store, ref.Path, cmd, extra...); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(lastLines(stderr.String(), 5)))
	}
	return json.Unmarshal(stdout.Bytes(), out)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
