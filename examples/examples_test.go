package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/rpc"
)

func TestMain(m *testing.M) {
	cleanState := testbin.PrivateState()
	code := m.Run()
	cleanState()
	testbin.Cleanup()
	os.Exit(code)
}

func python(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		testenv.Unavailable(t, "python3 not found")
	}
	return p
}

func TestPyhostHello(t *testing.T) {
	py := python(t)
	bin := testbin.Steward(t)
	cmd := exec.Command(py, "pyhost/pyhost.py", "--steward", bin)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyhost: %v\n%s", err, out)
	}
	text := string(out)
	end := strings.Index(text, "\n}\n") + 1
	var got struct {
		Hello rpc.HelloResult `json:"hello"`
	}
	if end < 0 || json.Unmarshal([]byte(text[:end+1]), &got) != nil {
		t.Fatalf("pyhost output is not the hello JSON:\n%s", text)
	}
	if got.Hello.ProtocolVersion != rpc.ProtocolVersion || len(got.Hello.Epoch) != 32 || got.Hello.Pid <= 0 {
		t.Fatalf("hello from python: %+v", got.Hello)
	}
	if !strings.Contains(text, "code -32601") {
		t.Fatalf("pyhost did not report method-not-found:\n%s", text)
	}
}

// newDataset makes a small dataset with the steward CLI, as a user would.
func newDataset(t *testing.T, bin string) string {
	t.Helper()
	// A private directory (0700, as mkdtemp makes it), owned by whoever runs the test: workers
	// reach the store only through the sidecar's gateway, so nothing is chowned or opened up.
	store := t.TempDir()
	out, err := exec.Command(bin, "dataset", "create", "--store", store, "--path", "sales", "--rows", "20000").CombinedOutput()
	if err != nil {
		t.Fatalf("dataset create: %v\n%s", err, out)
	}
	return store
}

func TestPyhostMutation(t *testing.T) {
	testenv.NeedRoot(t)
	py := python(t)
	bin := testbin.Steward(t)
	store := newDataset(t, bin)
	cmd := exec.Command(py, "pyhost/pyhost.py", "--steward", bin, "--store", store, "--dataset", "sales")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pyhost: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{`"phase": "NATIVE_RETURN"`, `"committed_version": 2`, "classified: COMMITTED"} {
		if !strings.Contains(text, want) {
			t.Fatalf("pyhost output lacks %q:\n%s", want, text)
		}
	}
}

func TestGohost(t *testing.T) {
	testenv.NeedRoot(t)
	bin := testbin.Steward(t)
	store := newDataset(t, bin)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "run", "./gohost", "--steward", bin,
		"--store", store, "--dataset", "sales", "--column", "id", "--type", "BTREE")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gohost: %v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{": COMMITTED", "phase NATIVE_RETURN, code 0, committed version 2", "RUNNING → COMMITTED"} {
		if !strings.Contains(text, want) {
			t.Fatalf("gohost output lacks %q:\n%s", want, text)
		}
	}
}

func TestGohello(t *testing.T) {
	bin := testbin.Steward(t)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "run", "./gohello", "--steward", bin)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gohello: %v\n%s", err, out)
	}
	for _, want := range []string{"launched through go-plugin (AutoMTLS)", "steward_rpc_requests_total", "sidecar shut down gracefully"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("gohello output lacks %q:\n%s", want, out)
		}
	}
}
