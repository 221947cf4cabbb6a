package v2vm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testbin"
	"github.com/cba1309c/steward/internal/testenv"
)

// build runs `go <args...>` static (CGO_ENABLED=0) from the repository root.
func build(t *testing.T, args ...string) {
	t.Helper()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), args...)
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// goTest is one "--- PASS|FAIL|SKIP: name (secs)" line of `go test -v` output.
var goTest = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)

// verdicts maps each test and subtest named in a step's -test.v output to its verdict and time.
func verdicts(lines []string) map[string]string {
	m := map[string]string{}
	for _, l := range lines {
		if g := goTest.FindStringSubmatch(l); g != nil {
			m[g[2]] = g[1] + " " + g[3] + "s"
		}
	}
	return m
}

func TestBootSmoke(t *testing.T) {
	tools, err := FindTools()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	dir := t.TempDir()
	build(t, "build", "-o", filepath.Join(dir, "init"), "./internal/v2vm/guestinit")
	build(t, "test", "-c", "-o", filepath.Join(dir, "isolation.test"), "./isolation")
	r, err := Boot(context.Background(), tools, dir, filepath.Join(dir, "init"),
		[]File{{Path: "/v2/isolation.test", Mode: 0o755, Src: filepath.Join(dir, "isolation.test")}},
		[]Step{{Name: "proc", Args: []string{"/v2/isolation.test", "-test.v", "-test.run", "TestProcCgroupPath"}, Env: []string{"PATH=/v2"}, Timeout: 60}},
		Options{})
	t.Logf("%s", strings.Join(r.Console, "\n"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(r.Kernel, r.Boot, r.Wall, verdicts(r.Steps[0].Lines))
	_ = time.Second
}
