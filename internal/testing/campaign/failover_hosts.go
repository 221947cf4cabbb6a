package campaign

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/internal/lockedproc"
)

// hostReadyTimeout bounds a host process's start: its claim may wait for a dead predecessor's
// lease, and its sidecar for the predecessor sidecar's ledger lock.
const hostReadyTimeout = 2 * time.Minute

// hostProc is one failover host process (Config.Node running NodeMain) under a fixed node name; a
// SIGKILLed one is replaced by a successor under the same name.
type hostProc struct {
	name string
	r    *run

	faultMu sync.Mutex // one host fault at a time
	cmdMu   sync.Mutex // one command on stdin at a time
	mu      sync.Mutex
	cur     *incarnation
	n       int // incarnations started
}

// incarnation is one process of a hostProc.
type incarnation struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	done     chan struct{} // closed once the process is reaped
	ready    chan struct{}
	status   chan string
	answers  chan string // JOB and NOJOB lines
	expected atomic.Bool // the campaign killed or stopped it
	n        int         // its number among the host's incarnations, from 1
	pid      int
	stderr   string
}

func (h *hostProc) current() *incarnation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur
}

// start starts an incarnation and waits for its READY line.
func (h *hostProc) start(ctx context.Context) error {
	r := h.r
	h.mu.Lock()
	h.n++
	n := h.n
	h.mu.Unlock()
	logs := filepath.Join(r.dir, "logs")
	cfg := NodeConfig{
		Name: h.name, Endpoints: r.fo.etcd.Endpoints, Prefix: r.fo.prefix, LeaseTTL: r.cfg.LeaseTTL,
		Wrapper: r.fo.wrapper, Steward: r.cfg.Steward,
		SidecarArgs: r.nodeSidecarArgs(h.name),
		SidecarLog:  filepath.Join(logs, fmt.Sprintf("%s.sidecar.%d.log", h.name, n)),
		AccessKey:   r.minio.AccessKey, SecretKey: r.minio.SecretKey,
		ExecuteDeadline: r.cfg.ExecuteDeadline, Executors: r.cfg.Executors, Quota: r.cfg.Mutations + 1,
	}
	if r.cfg.Engine == EngineLance {
		cfg.SidecarTemp = r.sidecarTemp()
	}
	blob, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	inc := &incarnation{n: n, done: make(chan struct{}), ready: make(chan struct{}), status: make(chan string, 1),
		answers: make(chan string, 8), stderr: filepath.Join(logs, fmt.Sprintf("%s.host.%d.log", h.name, n))}
	errf, err := os.OpenFile(inc.stderr, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer errf.Close()
	// The campaign directory on the command line lets the leftover check find a stray host.
	inc.cmd = exec.Command(r.cfg.Node, "node", "--name", h.name, "--dir", r.dir)
	inc.cmd.Env = append(os.Environ(), NodeConfigEnv+"="+string(blob))
	inc.cmd.Stderr = errf
	inc.cmd.SysProcAttr = hostAttr()
	if inc.stdin, err = inc.cmd.StdinPipe(); err != nil {
		return err
	}
	out, err := inc.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	exited := make(chan error, 1)
	if err := lockedproc.Start(inc.cmd, exited, inc.done); err != nil {
		return fmt.Errorf("start %s: %w", h.name, err)
	}
	inc.pid = inc.cmd.Process.Pid
	go h.read(inc, out)
	h.mu.Lock()
	h.cur = inc
	h.mu.Unlock()
	go h.watch(inc)
	select {
	case <-inc.ready:
		r.log.Info("host ready", "node", h.name, "incarnation", n, "pid", inc.pid)
		return nil
	case <-inc.done:
		return fmt.Errorf("%s exited before READY: %s", h.name, tailFile(inc.stderr, 1500))
	case <-time.After(hostReadyTimeout):
		_ = inc.cmd.Process.Signal(syscall.SIGKILL)
		return fmt.Errorf("%s not ready after %s: %s", h.name, hostReadyTimeout, tailFile(inc.stderr, 1500))
	case <-ctx.Done():
		_ = inc.cmd.Process.Signal(syscall.SIGKILL)
		return ctx.Err()
	}
}

// read follows an incarnation's stdout protocol lines as they come: a SEND line is counted
// before the host could die.
func (h *hostProc) read(inc *incarnation, out io.Reader) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 2 && f[0] == lineReady:
			close(inc.ready)
		case len(f) == 3 && f[0] == lineSend:
			h.r.onHostSend(h, inc, f[1], f[2])
		case len(f) >= 3 && f[0] == lineStatus:
			select {
			case inc.status <- sc.Text():
			default:
			}
		case (len(f) == 2 && f[0] == lineJob) || (len(f) >= 3 && f[0] == lineNoJob):
			select {
			case inc.answers <- sc.Text():
			default:
			}
		default:
			h.r.log.Warn("host line", "node", h.name, "line", sc.Text())
		}
	}
}

// watch reports a host that exited without the campaign killing it, and starts a successor.
func (h *hostProc) watch(inc *incarnation) {
	<-inc.done
	if inc.expected.Load() {
		return
	}
	h.r.violate("host-exit", "", fmt.Sprintf("%s (pid %d) exited by itself: %s", h.name, inc.pid, tailFile(inc.stderr, 1500)))
	h.r.faults.Add(1)
	defer h.r.faults.Done()
	h.faultMu.Lock()
	defer h.faultMu.Unlock()
	// A kill can meet a host that was exiting by itself: kill then starts the successor
	// (while this waited for faultMu), and a second one would find the node name held.
	if h.current() != inc {
		return
	}
	if err := h.start(h.r.ctx); err != nil {
		h.r.violate("host-restart", "", err.Error())
	}
}

// kill SIGKILLs the host process and starts its successor. It reports whether the kill was
// delivered (no other fault of this host was under way) and whether the host had a job RUNNING.
func (h *hostProc) kill(ctx context.Context) (delivered, busy bool) {
	if !h.faultMu.TryLock() {
		return false, false
	}
	defer h.faultMu.Unlock()
	busy = h.r.busyOn(h.name)
	inc := h.current()
	inc.expected.Store(true)
	if err := inc.cmd.Process.Signal(syscall.SIGKILL); err != nil { // a pidfd: never another process
		h.r.violate("host-kill", "", fmt.Sprintf("%s: %v", h.name, err))
		return false, busy
	}
	<-inc.done
	h.r.log.Info("host killed", "node", h.name, "pid", inc.pid, "busy", busy)
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = h.start(ctx); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		h.r.violate("host-restart", "", fmt.Sprintf("%s after SIGKILL: %v", h.name, err))
	}
	return true, busy
}

// pause SIGSTOPs the host process for d, then SIGCONTs it. Only the host stops: its sidecar and
// workers run on.
func (h *hostProc) pause(d time.Duration) (delivered, busy bool) {
	if !h.faultMu.TryLock() {
		return false, false
	}
	defer h.faultMu.Unlock()
	busy = h.r.busyOn(h.name)
	inc := h.current()
	if err := inc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return false, busy
	}
	h.r.log.Info("host stopped", "node", h.name, "for", d, "busy", busy)
	time.Sleep(d)
	if err := inc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		h.r.violate("host-stop", "", fmt.Sprintf("%s: SIGCONT: %v", h.name, err))
	}
	h.r.log.Info("host continued", "node", h.name)
	return true, busy
}

// ledger asks the host for its sidecar's ledger figures.
func (h *hostProc) ledger(ctx context.Context) (used, unsettled int, err error) {
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	inc := h.current()
	select {
	case <-inc.status: // a late answer to an earlier request
	default:
	}
	if _, err := io.WriteString(inc.stdin, "status\n"); err != nil {
		return 0, 0, err
	}
	select {
	case line := <-inc.status:
		f := strings.Fields(line)
		used, _ = strconv.Atoi(f[1])
		unsettled, _ = strconv.Atoi(f[2])
		if used < 0 {
			return 0, 0, fmt.Errorf("objects.status: %s", strings.Join(f[3:], " "))
		}
		return used, unsettled, nil
	case <-inc.done:
		return 0, 0, fmt.Errorf("%s exited", h.name)
	case <-time.After(15 * time.Second):
		return 0, 0, fmt.Errorf("%s did not answer status", h.name)
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
}

// submitSegmented has the host admit req (a "segmented" command) and waits for its answer. A
// refusal comes back as the dispatcher's sentinel (ErrJobExists, ErrInvalidJob), wrapped.
func (h *hostProc) submitSegmented(ctx context.Context, req dispatch.SegmentedRequest) error {
	blob, err := json.Marshal(req)
	if err != nil {
		return err
	}
	h.cmdMu.Lock()
	defer h.cmdMu.Unlock()
	inc := h.current()
	if _, err := io.WriteString(inc.stdin, cmdSegmented+" "+string(blob)+"\n"); err != nil {
		return fmt.Errorf("%s: %w", h.name, err)
	}
	timeout := time.After(submitTimeout)
	for {
		select {
		case line := <-inc.answers:
			f := strings.Fields(line)
			switch {
			case f[1] != req.ID && f[1] != "-": // a late answer to an earlier command
			case f[0] == lineJob:
				return nil
			case f[2] == noJobExists:
				return fmt.Errorf("%w: on %s: %s", dispatch.ErrJobExists, h.name, strings.Join(f[3:], " "))
			case f[2] == noJobInvalid:
				return fmt.Errorf("%w: on %s: %s", dispatch.ErrInvalidJob, h.name, strings.Join(f[3:], " "))
			default:
				return fmt.Errorf("on %s: %s", h.name, strings.Join(f[3:], " "))
			}
		case <-inc.done:
			return fmt.Errorf("%s exited before answering", h.name)
		case <-timeout:
			return fmt.Errorf("%s did not answer within %s", h.name, submitTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// submitTimeout bounds a host's answer to "segmented": its SubmitSegmented (40s) and a stop.
const submitTimeout = 45 * time.Second

// stop ends the host gracefully (stdin EOF), SIGKILLing it after a minute.
func (h *hostProc) stop() {
	h.faultMu.Lock() // a fault under way finishes first
	defer h.faultMu.Unlock()
	inc := h.current()
	if inc == nil {
		return
	}
	inc.expected.Store(true)
	_ = inc.cmd.Process.Signal(syscall.SIGCONT)
	inc.stdin.Close()
	select {
	case <-inc.done:
	case <-time.After(time.Minute):
		h.r.violate("host-stop", "", h.name+" did not stop within a minute of stdin EOF: SIGKILLed")
		_ = inc.cmd.Process.Signal(syscall.SIGKILL)
		<-inc.done
	}
}

// nodeSidecarArgs are a host's sidecar flags: the campaign's, on a state directory of the node's
// own (which its successors reuse).
func (r *run) nodeSidecarArgs(node string) []string {
	args := r.sidecarArgs()
	for i := range args {
		if args[i] == "--state-dir" {
			args[i+1] = filepath.Join(r.stateDir, node)
		}
	}
	return args
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(tail(b, n)))
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
