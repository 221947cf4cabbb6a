package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/enginesdk"
	"github.com/cba1309c/steward/sidecar/workerproto"
	"golang.org/x/sys/unix"
)

// Main is the hostile engine's entry: with no argument it serves one request over the engine
// protocol; "linger MARKER", "sleep", "nop", "int80", "conns …" and "after …" are its own helper
// processes.
// It returns the exit code.
func Main(args []string) int {
	recordStartFDs()
	if len(args) > 0 {
		switch args[0] {
		case "linger":
			return linger(args[1:])
		case "sleep":
			time.Sleep(time.Minute)
			return 0
		case "nop":
			return 0
		case "int80":
			return int80Main()
		case "conns":
			return connsMain(args[1:])
		case "after":
			if len(args) != 8 {
				return 2
			}
			return afterAnswer(args[1:7], args[7])
		}
	}
	c, err := enginesdk.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		return 2
	}
	return enginesdk.Serve(context.Background(), c,
		workerproto.Engine{Name: "hostile", IndexTypes: []string{IndexType}, Settle: workerproto.SettleFence}, engine{})
}

type engine struct{}

var _ enginesdk.Engine = engine{}

// Mutate runs the invocation's mode (ParamMode). The main mode runs every attack area, then
// answers COMMITTED at pinned+1 without having written a manifest: that claim is itself the last
// attack (the sidecar must not pass it on). The other modes answer by themselves and exit.
func (engine) Mutate(ctx context.Context, c *enginesdk.Conn, req *workerproto.MutateRequest) *workerproto.Result {
	r := newRun(c, req)
	switch r.p[ParamMode] {
	case ModeNoop:
		r.noop()
	case ModeUUID:
		r.badUUID()
	case ModeMessage:
		r.message()
	case ModeLinger:
		r.lingerAfterAnswer()
	case ModeRace:
		r.race()
	case ModeAlias:
		r.alias()
	case ModeForge:
		r.forgeAnswer(ctx)
	default:
		r.all(ctx)
	}
	r.emit(Finding{Attack: "answer.claim-commit", Verdict: Pending,
		Tried:    fmt.Sprintf("answer NATIVE_RETURN 0 COMMITTED at pinned+1 (%d) without having written its manifest", r.pinned+1),
		Evidence: "the test judges the sidecar's answer: it must be INDETERMINATE -23 UNCONFIRMED_COMMIT, and index.resolve NOT_COMMITTED"})
	r.emitDone()
	return &workerproto.Result{Phase: rpc.PhaseNativeReturn, Code: rpc.NativeOK, CompletionReason: rpc.CompletionCommitted,
		CommittedVersion: req.PinnedVersion + 1, ObservedLatest: req.PinnedVersion + 1,
		Message: "the hostile engine committed nothing"}
}

// run is one mutation's attack session.
type run struct {
	c      *enginesdk.Conn
	req    *workerproto.MutateRequest
	p      map[string]string
	inv    string
	ds     string // the dataset path, without slashes at the ends
	pinned int64
	tmp    string // the domain's private temp dir
	only   map[string]bool
	scan   *memScan // the sidecar's memory as sidecar.mem read it: the forged answer's epoch and id

	gw        *s3raw // its storage gateway, as the request names it (nil: none named)
	gwOK      bool   // the gateway served a control write, read and delete
	gwControl string // what the control got

	mu sync.Mutex
	n  int
}

func newRun(c *enginesdk.Conn, req *workerproto.MutateRequest) *run {
	r := &run{c: c, req: req, p: req.Index.Params, inv: req.InvocationID, ds: strings.Trim(req.Dataset.Path, "/"),
		pinned: req.PinnedVersion, tmp: req.TempDir}
	if r.p == nil {
		r.p = map[string]string{}
	}
	if r.tmp == "" {
		r.tmp = os.Getenv("TMPDIR")
	}
	if s := r.p[ParamOnly]; s != "" {
		r.only = map[string]bool{}
		for _, a := range strings.Split(s, ",") {
			r.only[a] = true
		}
	}
	st := req.Dataset.Store
	if bucket, ok := strings.CutPrefix(st.URL, "s3://"); ok && st.Endpoint != "" && req.Credentials != nil {
		r.gw = &s3raw{addr: st.Endpoint, bucket: strings.Trim(bucket, "/"), ak: req.Credentials.AccessKey}
	}
	return r
}

// all runs the attack areas in an order that keeps each attack's preconditions: the victim and
// the sidecar before anything that could end the session, reserve frames before the gateway's
// quotas are spent, the gateway's request flood and the progress flood last.
func (r *run) all(ctx context.Context) {
	areas := []struct {
		name string
		fn   func(context.Context)
	}{
		{"identity", r.identity},
		{"ns", r.namespaces},
		{"victim", r.victim},
		{"sidecar", r.sidecar},
		{"cgroup", r.cgroups},
		{"process", r.processes},
		{"nnp", r.noNewPrivs},
		{"seccomp", r.seccomp},
		{"fs", r.filesystem},
		{"net", r.network},
		{"store", r.store},
		{"custody", r.custody},
		{"gateway", r.gateway},
		{"objects", r.objects},
		{"progress", r.progressFlood},
	}
	// The slow-loris connection waits out the gateway's header timeout (10 s) beside the others.
	var slow chan Finding
	if r.p[ParamSlowLoris] == "1" && (r.only == nil || r.only["gateway"]) {
		slow = make(chan Finding, 1)
		go func() { slow <- r.slowLoris() }()
	}
	for _, a := range areas {
		if r.only == nil || r.only[a.name] {
			a.fn(ctx)
		}
	}
	if slow != nil {
		r.emit(<-slow)
	}
}

// emit writes one finding line to stderr (bounded well under the sidecar's 4 KiB line cut).
func (r *run) emit(f Finding) {
	if len(f.Evidence) > 1500 {
		f.Evidence = f.Evidence[:1500] + "…"
	}
	b, _ := json.Marshal(f)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	fmt.Fprintf(os.Stderr, "%s%s\n", FindingPrefix, b)
}

func (r *run) emitDone() {
	b, _ := json.Marshal(Done{Invocation: r.inv, Findings: r.n})
	fmt.Fprintf(os.Stderr, "%s%s\n", DonePrefix, b)
}

// errno names the errno inside err ("" if there is none).
func errno(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return strconv.Itoa(int(e))
	}
	return ""
}

// blocked is the finding of an attack the system refused with err.
func blocked(attack, tried string, err error) Finding {
	return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Errno: errno(err), Evidence: err.Error()}
}

// verdict is Succeeded if ok, else Blocked.
func verdict(ok bool) Verdict {
	if ok {
		return Succeeded
	}
	return Blocked
}

// self is this executable, for the helper processes (never a $PATH lookup).
func self() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return "/proc/self/exe"
}

// helper returns a command running this executable with args, in the engine's environment.
func helper(args ...string) *exec.Cmd {
	cmd := exec.Command(self(), args...)
	cmd.Env = os.Environ()
	return cmd
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }

// intParam reads an integer parameter (0 if absent or malformed).
func (r *run) intParam(k string) int {
	n, _ := strconv.Atoi(r.p[k])
	return n
}
