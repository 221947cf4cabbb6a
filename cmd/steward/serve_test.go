package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar"
	"github.com/cba1309c/steward/storecfg"
)

const serveCanary = "serve-canary-SECRET-3f9a1c"

// TestServeRefusesEnvironmentKeys: a sidecar started with a key in its environment exits 2 with
// a message that names the variable, never its value.
func TestServeRefusesEnvironmentKeys(t *testing.T) {
	bin := testbin.Steward(t)
	for _, v := range []string{envS3AccessKey, envS3SecretKey} {
		cmd := exec.Command(bin, "serve", "--framing", "ndjson", "--state-dir", t.TempDir(), "--cgroup-parent", "auto")
		cmd.Env = []string{"PATH=/usr/bin:/bin", v + "=" + serveCanary}
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 {
			t.Fatalf("%s set: %v, want exit 2\n%s", v, err, out)
		}
		if !strings.Contains(string(out), "never read from its environment") || !strings.Contains(string(out), v) ||
			strings.Contains(string(out), serveCanary) {
			t.Fatalf("%s set: output %q: want the refusal naming the variable and not its value", v, out)
		}
	}
}

// serveProc is a real `steward serve --framing ndjson` spoken to line by line.
type serveProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     *os.File
	out    *bufio.Scanner
	stderr *bytes.Buffer
}

func startServe(t *testing.T, extra []*os.File, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(testbin.Steward(t), append([]string{"serve", "--framing", "ndjson", "--state-dir", t.TempDir()}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	cmd.ExtraFiles = extra
	p := &serveProc{t: t, cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, p.in = r, w
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	p.out = bufio.NewScanner(out)
	t.Cleanup(func() {
		p.in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("steward serve: %v\n%s", err, p.stderr)
		}
		if strings.Contains(p.stderr.String(), serveCanary) {
			t.Errorf("the sidecar logged its own secret key:\n%s", p.stderr)
		}
	})
	return p
}

func (p *serveProc) call(id int, method string, params any) map[string]json.RawMessage {
	p.t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if _, err := fmt.Fprintf(p.in, "%s\n", req); err != nil {
		p.t.Fatalf("write %s: %v\n%s", method, err, p.stderr)
	}
	if !p.out.Scan() {
		p.t.Fatalf("no answer to %s (%v)\n%s", method, p.out.Err(), p.stderr)
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(p.out.Bytes(), &msg); err != nil {
		p.t.Fatalf("answer %q: %v", p.out.Text(), err)
	}
	return msg
}

// TestServeOwnKeysFromFD: the keys come once through an inherited pipe, which the sidecar
// closes; they are in neither its environment nor its descriptors; hello reports the source and
// the allow-list (names only); a call without credentials on a store off the list is -32016.
func TestServeOwnKeysFromFD(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(storecfg.FormatCredentials(rpc.Credentials{AccessKey: "AKIDSERVE", SecretKey: serveCanary})); err != nil {
		t.Fatal(err)
	}
	w.Close()
	pipe, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	allowed := "s3://warehouse/team@127.0.0.1:9"
	p := startServe(t, []*os.File{r}, "--s3-credentials-fd", "3", "--allow-store", allowed, "--allow-store", "s3://scratch@127.0.0.1:9;secure")
	r.Close()
	var hello rpc.HelloResult
	if err := json.Unmarshal(p.call(1, rpc.MethodHello, rpc.HelloParams{ProtocolVersion: rpc.ProtocolVersion})["result"], &hello); err != nil {
		t.Fatal(err)
	}
	c := hello.Credentials
	if c == nil || c.Source != sidecar.CredentialsFD || len(c.AllowStores) != 2 || c.AllowStores[0] != allowed {
		t.Fatalf("hello credentials %+v: want source fd and the two allowed stores", c)
	}
	pid := p.cmd.Process.Pid
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(environ, []byte(serveCanary)) || bytes.Contains(environ, []byte("AKIDSERVE")) {
		t.Fatal("the sidecar's environment holds its keys")
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); target == pipe {
			t.Fatalf("the credentials pipe (%s) is still open in the sidecar as fd %s", pipe, fd.Name())
		}
	}
	resolve := func(id int, url string) (int64, string) {
		params := rpc.ResolveParams{InvocationID: "inv-1", PinnedVersion: 1,
			Dataset: rpc.DatasetRef{Store: rpc.StoreSpec{URL: url, Endpoint: "127.0.0.1:9"}, Path: "d"}}
		var werr struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		}
		if e, ok := p.call(id, rpc.MethodIndexResolve, params)["error"]; ok {
			if err := json.Unmarshal(e, &werr); err != nil {
				t.Fatal(err)
			}
		}
		return werr.Code, werr.Message
	}
	code, msg := resolve(2, "s3://attacker-bucket")
	if code != int64(rpc.CodeStoreNotAllowed) || !strings.Contains(msg, "s3://attacker-bucket@127.0.0.1:9") || strings.Contains(msg, serveCanary) {
		t.Fatalf("resolve on a store off the list: code %d %q; want -32016 naming the store", code, msg)
	}
	// On the allowed store the call goes ahead (and finds nothing listening on port 9).
	if code, msg := resolve(3, "s3://warehouse/team/ds"); code == int64(rpc.CodeStoreNotAllowed) {
		t.Fatalf("resolve below an allowed prefix refused: %q", msg)
	}
}

// TestServeCredentialsFileChecked: serve refuses a group-readable file, and keys without any
// --allow-store; it starts with a 0400 file.
func TestServeCredentialsFileChecked(t *testing.T) {
	bin := testbin.Steward(t)
	file := filepath.Join(t.TempDir(), "s3")
	if err := os.WriteFile(file, storecfg.FormatCredentials(rpc.Credentials{AccessKey: "AK", SecretKey: serveCanary}), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		args       []string
	}{
		{"group-readable", "group and others must have no access", []string{"--allow-store", "s3://bkt@127.0.0.1:9"}},
		{"no allow-list", "no store is allowed", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no allow-list" {
				if err := os.Chmod(file, 0o400); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(bin, append([]string{"serve", "--framing", "ndjson", "--state-dir", t.TempDir(), "--s3-credentials-file", file}, tc.args...)...)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
			cmd.Stdin = strings.NewReader("")
			out, err := cmd.CombinedOutput()
			if _, ok := err.(*exec.ExitError); !ok || !strings.Contains(string(out), tc.want) || strings.Contains(string(out), serveCanary) {
				t.Fatalf("%v\n%s\nwant a refusal with %q", err, out, tc.want)
			}
		})
	}
	p := startServe(t, nil, "--s3-credentials-file", file, "--allow-store", "s3://bkt@127.0.0.1:9")
	var hello rpc.HelloResult
	if err := json.Unmarshal(p.call(1, rpc.MethodHello, rpc.HelloParams{ProtocolVersion: rpc.ProtocolVersion})["result"], &hello); err != nil {
		t.Fatal(err)
	}
	if c := hello.Credentials; c == nil || c.Source != sidecar.CredentialsFile || len(c.AllowStores) != 1 {
		t.Fatalf("hello credentials %+v: want source file, one allowed store", c)
	}
}
