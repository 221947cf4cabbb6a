package sidecar_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/enginetest"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
	"github.com/minio/minio-go/v7"
)

// BenchmarkLanceProfile: where the wall time of each Lance row of BenchmarkLanceSidecar goes,
// through the sidecar and in the bare pylance process it is compared with, on a local store and
// on MinIO. Not part of make bench (it measures phases, not goals): run it by hand, e.g.
//
//	STEWARD_REQUIRE_REAL=1 nice go test -run '^$' -bench LanceProfile -benchtime 3x ./sidecar/
//
// Each iteration is one call through the sidecar and one bare process, alternated; the sidecar's
// call arrives after a pause (its spare started, imported Lance and was frozen), as a call to an
// idle host does. The phases come from the sidecar's "invocation timing" debug line (queued,
// launch or thaw + gateway + request, engine, teardown, the decision from storage), the engine's
// own timing line on its stderr (open, build, commit, answer) and, for the bare process,
// lancectl's marks (interpreter start, imports, open, build with Lance's commit, reopen, exit).
// Each phase's median over the iterations is reported as <phase>-ms.
func BenchmarkLanceProfile(b *testing.B) {
	testenv.NeedRoot(b)
	for _, onMinIO := range []bool{false, true} {
		name := map[bool]string{false: "file", true: "minio"}[onMinIO]
		b.Run(name, func(b *testing.B) { profileStore(b, onMinIO) })
	}
}

func profileStore(b *testing.B, onMinIO bool) {
	l := newLanceSidecar(b, onMinIO, "--worker-memory", "1073741824", "--log-level", "debug")
	ctx := context.Background()
	n := 0
	fresh := func(src string) string {
		n++
		path := fmt.Sprintf("ds-%d", n)
		if onMinIO {
			uploadDir(b, l.mc, l.bucket, src, path)
		} else {
			if err := enginetest.LinkCopy(src, filepath.Join(l.root, path)); err != nil {
				b.Fatal(err)
			}
			testenv.GuestOwn(b, filepath.Join(l.root, path))
		}
		return path
	}
	cases := append([]lanceBuild{{"noop", "BTREE", "id", nil, 100_000, 0}}, lanceBuilds...)
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			src, err := enginetest.CachedLanceDataset(l.python, l.dir, c.rows, c.dim)
			if err != nil {
				b.Fatal(err)
			}
			noopPath := ""
			if c.name == "noop" {
				noopPath = fresh(src)
			}
			call := func(want string, pinned int64) map[string]float64 {
				path := noopPath
				if noopPath == "" {
					path = fresh(src)
				}
				p := l.lanceParams(randID("inv-"), path, pinned, rpc.OpCreate, "idx", c.column, c.typ, c.params)
				p.IfNotExists = pinned > 1
				start := time.Now()
				res, err := l.c.Mutate(ctx, p)
				wall := time.Since(start)
				if err != nil || res.CompletionReason != want {
					b.Fatalf("%s: %v %+v", p.InvocationID, err, res)
				}
				return sidecarPhases(b, l, p.InvocationID, wall)
			}
			// The index the no-ops find, and the spares are Lance engines from here.
			call(rpc.CompletionCommitted, 1)
			bare := func() map[string]float64 {
				if noopPath != "" {
					return bareOpenPhases(b, l, l.uri(noopPath))
				}
				_, t, err := enginetest.BareIndex(ctx, l.python, l.dir, l.s3, l.uri(fresh(src)), c.column, c.typ, "idx", c.params)
				if err != nil {
					b.Fatal(err)
				}
				return map[string]float64{
					"bare-wall": ms(t.Exited.Sub(t.Spawned)), "bare-interp": since(t.Spawned, t.Started),
					"bare-import": 1000 * (t.Imported - t.Started), "bare-open": 1000 * (t.Opened - t.Imported),
					"bare-build+commit": 1000 * (t.Built - t.Opened), "bare-reopen": 1000 * (t.Reopened - t.Built),
					"bare-exit": ms(t.Exited.Sub(unixTime(t.Reopened))),
				}
			}
			want, pinned := rpc.CompletionCommitted, int64(1)
			if noopPath != "" {
				want, pinned = rpc.CompletionIfNotExistsNoop, 2
			}
			all := map[string][]float64{}
			for i := 0; i < b.N; i++ {
				time.Sleep(2500 * time.Millisecond) // the spare imported Lance and is frozen
				for k, v := range call(want, pinned) {
					all[k] = append(all[k], v)
				}
				for k, v := range bare() {
					all[k] = append(all[k], v)
				}
			}
			keys := make([]string, 0, len(all))
			for k := range all {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			var line strings.Builder
			for _, k := range keys {
				m := median(all[k])
				b.ReportMetric(m, k+"-ms")
				fmt.Fprintf(&line, " %s=%.1f", k, m)
			}
			b.Logf("profile %s:%s", c.name, line.String())
		})
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func unixTime(t float64) time.Time { return time.Unix(0, int64(t*1e9)) }

// since is the ms from a to the Unix time t.
func since(a time.Time, t float64) float64 { return ms(unixTime(t).Sub(a)) }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// sidecarPhases reads invocation inv's timing lines from the sidecar's log: its own and the
// engine's (which arrives on the engine's stderr, possibly after the answer).
func sidecarPhases(b *testing.B, l *lanceSidecar, inv string, wall time.Duration) map[string]float64 {
	b.Helper()
	out := map[string]float64{"sc-wall": ms(wall)}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var own, engine bool
		sc := bufio.NewScanner(strings.NewReader(l.logs.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, inv) {
				continue
			}
			var m map[string]any
			if json.Unmarshal([]byte(line), &m) != nil {
				continue
			}
			switch {
			case m["@message"] == "invocation timing":
				own = true
				for _, k := range []string{"queued_ms", "to_request_ms", "engine_ms", "teardown_ms", "decide_ms"} {
					if v, ok := m[k].(float64); ok {
						out["sc-"+strings.TrimSuffix(k, "_ms")] = v
					}
				}
			case m["@message"] == "worker stderr" && strings.HasPrefix(fmt.Sprint(m["line"]), "steward-lance timing "):
				var t struct{ Ms map[string]float64 }
				if err := json.Unmarshal([]byte(strings.TrimPrefix(fmt.Sprint(m["line"]), "steward-lance timing ")), &t); err == nil {
					engine = true
					for k, v := range t.Ms {
						if k != "imported" && k != "request" { // a spare's, before its call
							out["eng-"+k] = v
						}
					}
				}
			}
		}
		if own && engine {
			var accounted float64
			for _, k := range []string{"sc-queued", "sc-to_request", "sc-engine", "sc-teardown", "sc-decide"} {
				accounted += out[k]
			}
			out["sc-rpc"] = out["sc-wall"] - accounted // the host's call and the answer's way back
			return out
		}
		if time.Now().After(deadline) {
			b.Fatalf("no timing lines for %s in the sidecar's log (own %v, engine %v)", inv, own, engine)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bareOpenPhases is a bare engine start (enginetest.BareOpen) with its phases.
func bareOpenPhases(b *testing.B, l *lanceSidecar, uri string) map[string]float64 {
	b.Helper()
	_, t, err := enginetest.BareOpen(context.Background(), l.python, l.s3, uri)
	if err != nil {
		b.Fatal(err)
	}
	return map[string]float64{"bare-wall": ms(t.Exited.Sub(t.Spawned)), "bare-interp": since(t.Spawned, t.Started),
		"bare-import": 1000 * (t.Imported - t.Started), "bare-open": 1000 * (t.Opened - t.Imported), "bare-exit": ms(t.Exited.Sub(unixTime(t.Opened)))}
}

// uploadDir puts every file below dir into bucket under prefix.
func uploadDir(b testing.TB, mc *minio.Client, bucket, dir, prefix string) {
	b.Helper()
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		_, err = mc.FPutObject(context.Background(), bucket, prefix+"/"+filepath.ToSlash(rel), path, minio.PutObjectOptions{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
}
