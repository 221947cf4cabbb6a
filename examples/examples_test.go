package examples_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testbin"
	"github.com/cba1309c/steward/internal/testenv"
	"github.com/cba1309c/steward/rpc"
)

func TestMain(m *testing.M) {
	code := m.Run()
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
	end := strings.LastIndex(text, "}")
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
