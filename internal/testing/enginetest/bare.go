package enginetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The baselines of the Lance benchmarks (this package's engine-vs-bare builds and the sidecar's
// round trips), kept in one place so that every benchmark compares against the same processes:
// a bare python with pylance, the environment the harness gives an engine, and nothing of steward.

// Bare is one run of a bare baseline process.
type Bare struct {
	Wall    time.Duration // process start → exit
	CPU     time.Duration // user + system (less sensitive than Wall to a shared machine's load)
	PeakRSS int64         // bytes (getrusage ru_maxrss)
}

// BareBuild builds an index the plain pylance way in a bare process (`lancectl.py index`: import
// lance, open the dataset, create_scalar_index / create_index, committed by Lance itself at the
// next version): the binding call the Lance engine makes, without steward around it.
func BareBuild(ctx context.Context, python, engineDir, uri, column, typ, name string, params map[string]string) (Bare, error) {
	b, _, err := BareIndex(ctx, python, engineDir, nil, uri, column, typ, name, params)
	return b, err
}

// BareTiming is where a bare build's process spent its time (Unix times from lancectl.py index,
// beside the process's own start and exit as the caller saw them).
type BareTiming struct {
	Spawned, Exited                            time.Time // exec started, wait returned
	Started, Imported, Opened, Built, Reopened float64   // lancectl's marks, Unix seconds
}

// BareIndex is BareBuild with env added to the process's environment (STEWARD_S3_* for an
// s3:// uri) and lancectl's own timing of the build.
func BareIndex(ctx context.Context, python, engineDir string, env []string, uri, column, typ, name string, params map[string]string) (Bare, BareTiming, error) {
	args := []string{filepath.Join(engineDir, "lancectl.py"), "index", uri, column, typ, name}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, k+"="+params[k])
	}
	var out struct {
		Timing struct{ Started, Imported, Opened, Built, Reopened float64 }
	}
	b, stdout, spawned, err := bareEnv(ctx, python, env, args...)
	if err != nil {
		return b, BareTiming{}, err
	}
	if err := json.Unmarshal(stdout, &out); err != nil {
		return b, BareTiming{}, fmt.Errorf("lancectl index answered %q: %w", stdout, err)
	}
	t := out.Timing
	return b, BareTiming{Spawned: spawned, Exited: spawned.Add(b.Wall), Started: t.Started, Imported: t.Imported,
		Opened: t.Opened, Built: t.Built, Reopened: t.Reopened}, nil
}

// BareOpen is a bare engine process start: python, `import lance`, open the dataset (its latest
// version), exit — what a cold engine does before it can look at a request. env is added to the
// process's environment (STEWARD_S3_* for an s3:// uri); its timing has Started, Imported, Opened.
func BareOpen(ctx context.Context, python string, env []string, uri string) (Bare, BareTiming, error) {
	b, stdout, spawned, err := bareEnv(ctx, python, env, "-c", bareOpenScript, uri)
	if err != nil {
		return b, BareTiming{}, err
	}
	var t [3]float64
	if err := json.Unmarshal(stdout, &t); err != nil {
		return b, BareTiming{}, fmt.Errorf("bare open answered %q: %w", stdout, err)
	}
	return b, BareTiming{Spawned: spawned, Exited: spawned.Add(b.Wall), Started: t[0], Imported: t[1], Opened: t[2]}, nil
}

// bareOpenScript opens argv[1] with the options lancectl.py gives an s3:// uri, and prints the
// Unix times of its start, the end of its import and the end of its open.
const bareOpenScript = `import time; t0 = time.time()
import json, os, sys, lance; t1 = time.time()
opts = None
if sys.argv[1].startswith("s3://"):
    opts = {"aws_endpoint": "http://" + os.environ["STEWARD_S3_ENDPOINT"], "allow_http": "true",
            "aws_region": "us-east-1", "aws_virtual_hosted_style_request": "false",
            "aws_access_key_id": os.environ.get("STEWARD_S3_ACCESS_KEY", ""),
            "aws_secret_access_key": os.environ.get("STEWARD_S3_SECRET_KEY", "")}
lance.dataset(sys.argv[1], storage_options=opts).version; t2 = time.time()
print(json.dumps([t0, t1, t2]))`

func bare(ctx context.Context, python string, args ...string) (Bare, error) {
	b, _, _, err := bareEnv(ctx, python, nil, args...)
	return b, err
}

// bareEnv runs one bare process with env added; it returns its stdout and when it was spawned.
func bareEnv(ctx context.Context, python string, env []string, args ...string) (Bare, []byte, time.Time, error) {
	tmp, err := os.MkdirTemp("", "steward-bare-")
	if err != nil {
		return Bare{}, nil, time.Time{}, err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.CommandContext(ctx, python, append([]string{"-B", "-s", "-E"}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + tmp, "HOME=" + tmp}, env...)
	cmd.Dir = tmp
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if err != nil {
		return Bare{}, nil, start, fmt.Errorf("bare %v: %w\n%s%s", args, err, out, stderr.Bytes())
	}
	ps := cmd.ProcessState
	return Bare{Wall: wall, CPU: ps.UserTime() + ps.SystemTime(), PeakRSS: ps.SysUsage().(*syscall.Rusage).Maxrss << 10}, out, start, nil
}

// CachedLanceDataset returns a local Lance dataset of rows rows (lancectl.py create: id, price,
// category, labels, text, and a vec column of dim float32 unless dim is 0) at version 1, generated
// once into $STEWARD_BENCH_CACHE (default $TMPDIR/steward-bench) and reused by later runs. Use it
// through LinkCopy: a build must not write into the cached copy.
func CachedLanceDataset(python, engineDir string, rows, dim int) (string, error) {
	return CachedLanceFragments(python, engineDir, rows, dim, 1)
}

// CachedLanceFragments is CachedLanceDataset written in frags fragments of equal rows (segment
// builds index fragment sets), at version frags (one append per fragment).
func CachedLanceFragments(python, engineDir string, rows, dim, frags int) (string, error) {
	cache := os.Getenv("STEWARD_BENCH_CACHE")
	if cache == "" {
		cache = filepath.Join(os.TempDir(), "steward-bench")
	}
	dir := filepath.Join(cache, fmt.Sprintf("lance-rows%d-dim%d", rows, dim))
	if frags > 1 {
		dir += fmt.Sprintf("-frags%d", frags)
	}
	if _, err := os.Stat(filepath.Join(dir, "_versions")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, "lance-gen-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command(python, "-B", "-s", "-E", filepath.Join(engineDir, "lancectl.py"), "create", filepath.Join(tmp, "ds"),
		"--rows", fmt.Sprint(rows), "--dim", fmt.Sprint(dim), "--fragments", fmt.Sprint(frags))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + tmp}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lancectl create: %w\n%s", err, out)
	}
	// Another run may have won the race: its copy is as good as this one.
	if err := os.Rename(filepath.Join(tmp, "ds"), dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "_versions")); serr != nil {
			return "", err
		}
	}
	return dir, nil
}

// LinkCopy makes dst a copy of the dataset at src with a hard link per file (Lance never rewrites
// a file, it only adds new ones, so the copies share the cached data and its page cache); a file
// that cannot be linked (another file system) is copied.
func LinkCopy(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if os.Link(p, target) == nil {
			return nil
		}
		return copyFile(p, target)
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ABBA runs a, base, base, a (so that a drift of the machine's load within the four runs falls on
// both sides equally) and returns each side's total. On an even round of make bench
// (STEWARD_BENCH_ROUND) it runs base, a, a, base instead: on this machine the outer two runs of
// four were the slow ones (IVF_PQ: whichever side ran first and last was 1.2x-1.7x slower in
// wall, with equal CPU time), so the rounds take turns.
func ABBA(a, base func() (time.Duration, error)) (totalA, totalBase time.Duration, err error) {
	type run struct {
		fn  func() (time.Duration, error)
		sum *time.Duration
	}
	order := []run{{a, &totalA}, {base, &totalBase}, {base, &totalBase}, {a, &totalA}}
	if n, _ := strconv.Atoi(os.Getenv("STEWARD_BENCH_ROUND")); n%2 == 0 && n > 0 {
		order = []run{{base, &totalBase}, {a, &totalA}, {a, &totalA}, {base, &totalBase}}
	}
	for _, f := range order {
		d, err := f.fn()
		if err != nil {
			return 0, 0, err
		}
		*f.sum += d
	}
	return totalA, totalBase, nil
}

// BenchABBA runs b.N ABBA rounds of a against base and reports each side's mean in seconds
// ("<aName>-s", "<baseName>-s") and the ratio of their totals ("<aName>/<baseName>"), the figure
// scripts/benchtable reads.
func BenchABBA(b *testing.B, aName, baseName string, a, base func() (time.Duration, error)) {
	var sumA, sumBase time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x, y, err := ABBA(a, base)
		if err != nil {
			b.Fatal(err)
		}
		sumA, sumBase = sumA+x, sumBase+y
	}
	b.ReportMetric(sumA.Seconds()/float64(2*b.N), aName+"-s")
	b.ReportMetric(sumBase.Seconds()/float64(2*b.N), baseName+"-s")
	b.ReportMetric(sumA.Seconds()/sumBase.Seconds(), aName+"/"+baseName)
}

// LanceEngineCPU sums the CPU the Lance engine processes of a sidecar's JSON log report in their
// timing lines (engine.py's "steward-lance timing", logged as "worker stderr"): each process's
// own, every thread, up to its answer; n is the number of such lines.
func LanceEngineCPU(logs string) (cpu time.Duration, n int) {
	const prefix = "steward-lance timing "
	for _, line := range strings.Split(logs, "\n") {
		var m struct {
			Message string `json:"@message"`
			Line    string `json:"line"`
		}
		if json.Unmarshal([]byte(line), &m) != nil || m.Message != "worker stderr" || !strings.HasPrefix(m.Line, prefix) {
			continue
		}
		var t struct {
			CPUms *float64 `json:"cpu_ms"`
		}
		if json.Unmarshal([]byte(strings.TrimPrefix(m.Line, prefix)), &t) == nil && t.CPUms != nil {
			cpu += time.Duration(*t.CPUms * float64(time.Millisecond))
			n++
		}
	}
	return cpu, n
}
