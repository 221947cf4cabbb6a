package campaign

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storecfg"
	"github.com/hashicorp/go-hclog"
)

// NodeConfigEnv is the environment variable that hands a failover host process its NodeConfig
// (JSON). It is the environment and not the command line because the config carries the MinIO
// credentials, and command lines are world-readable (and printed by the leftover check).
const NodeConfigEnv = "STEWARD_CAMPAIGN_NODE"

// The failover host process's line protocol on stdout, read by the campaign:
//
//	READY <sidecar epoch> <sidecar pid>   once the node holds its claim and drives its sidecar
//	SEND <invocation> <job>               before each index.mutate leaves for the sidecar (a
//	                                      segmented job's step names its step id, dispatch.StepID)
//	STATUS <tickets used> <unsettled>     the sidecar's ledger, answering "status" on stdin
//	JOB <job>                             the segmented job a "segmented" command admitted
//	NOJOB <job> <reason> <text>           a "segmented" command refused: reason "exists"
//	                                      (dispatch.ErrJobExists), "invalid" (ErrInvalidJob), or
//	                                      "failed" (anything else: another host may succeed)
//	ERROR <text>                          a failure (the node exits)
//
// stdin takes one command a line:
//
//	status                                       answered by STATUS
//	segmented <dispatch.SegmentedRequest JSON>   SubmitSegmented on this node's dispatcher, which
//	                                             plans through this node's sidecar (index.plan)
//	                                             and names it in the plan; answered by JOB or NOJOB
//
// EOF stops the node gracefully (dispatcher, sidecar, claim).
const (
	lineReady  = "READY"
	lineSend   = "SEND"
	lineStatus = "STATUS"
	lineJob    = "JOB"
	lineNoJob  = "NOJOB"
	lineError  = "ERROR"

	cmdStatus    = "status"
	cmdSegmented = "segmented"
)

// NOJOB reasons.
const (
	noJobExists  = "exists"
	noJobInvalid = "invalid"
	noJobFailed  = "failed"
)

// NodeConfig configures one failover host process: a dispatcher on the shared etcd journal with
// its own real sidecar. The campaign writes it; nothing else should.
type NodeConfig struct {
	// Name is the node's name in the cluster (its claim) and its sidecar's name.
	Name string
	// Endpoints and Prefix locate the shared journal.
	Endpoints []string
	Prefix    string
	// LeaseTTL is the node's claim lease.
	LeaseTTL time.Duration
	// Wrapper is the script that runs the sidecar with its stderr appended to SidecarLog; Steward
	// the executable it runs.
	Wrapper, Steward string
	// SidecarArgs are the sidecar's flags (state directory and cgroup parent included).
	SidecarArgs []string
	// SidecarLog is where this incarnation's sidecar writes its log lines, straight from its own
	// stderr: its "worker assigned" lines survive the host being SIGKILLed.
	SidecarLog string
	// SidecarTemp is the sidecar's TMPDIR on Lance (run.sidecarTemp, shared by the nodes as by
	// the single-host campaign's sidecars); "" leaves the node's own.
	SidecarTemp string
	// S3 endpoint credentials for the sidecar and for every job.
	AccessKey, SecretKey string
	// ExecuteDeadline, Executors and Quota are the dispatcher's (see Config).
	ExecuteDeadline time.Duration
	Executors       int
	Quota           int
}

// RunNode runs one failover host process until stdin ends (graceful) or it is killed. It reports
// on out per the line protocol above, and logs (its own and its dispatcher's) to log.
func RunNode(ctx context.Context, cfg NodeConfig, in io.Reader, out io.Writer, log hclog.Logger) (err error) {
	w := &lineWriter{w: out}
	defer func() {
		if err != nil {
			w.line(lineError, err.Error())
		}
	}()
	octx, cancel := context.WithTimeout(ctx, 4*cfg.LeaseTTL+30*time.Second)
	store, err := dispatch.OpenEtcd(octx, dispatch.EtcdOptions{Endpoints: cfg.Endpoints, Prefix: cfg.Prefix,
		Node: cfg.Name, LeaseTTL: cfg.LeaseTTL, ClaimWait: 4 * cfg.LeaseTTL, OpTimeout: 5 * time.Second})
	cancel()
	if err != nil {
		return fmt.Errorf("open the journal: %w", err)
	}
	defer store.Close()
	sc, err := launchNodeSidecar(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer sc.Close()
	creds := &rpc.Credentials{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey}
	d, err := dispatch.New(dispatch.Config{
		Store: store, Interval: 200 * time.Millisecond, ExecuteDeadline: cfg.ExecuteDeadline,
		AnswerGrace: 15 * time.Second, MaxInFlightPerSidecar: cfg.Executors,
		ResolveRetryInterval: time.Second, ResolveTimeout: 20 * time.Second,
		MaxUnresolvedPerDataset: cfg.Quota, MaxUnresolved: cfg.Quota,
		Credentials: func(context.Context, rpc.DatasetRef) (*rpc.Credentials, error) { return creds, nil },
		Logger:      log.Named("dispatch"),
	})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := addSidecar(ctx, d, cfg, &sendReporter{Client: sc, w: w}, log); err != nil {
		return err
	}
	w.line(lineReady, sc.Epoch(), fmt.Sprint(sc.Pid()))
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = d.Run(rctx) }()
	return serveCommands(ctx, in, w, sc, d)
}

// addSidecar registers the node's sidecar, whose epoch goes to etcd under the node's lease. A
// put can outlast its OpTimeout while the campaign has an etcd member down (a fresh-clone run
// under load lost a node that way: "announce epoch: context deadline exceeded" 5 s after the
// member's SIGKILL); a host retries it, as long as its journal open may take.
func addSidecar(ctx context.Context, d *dispatch.Dispatcher, cfg NodeConfig, sc dispatch.Sidecar, log hclog.Logger) error {
	deadline := time.Now().Add(4*cfg.LeaseTTL + 30*time.Second)
	for {
		err := d.AddSidecar(cfg.Name, sc)
		if err == nil || errors.Is(err, dispatch.ErrInvalidConfig) || time.Now().After(deadline) {
			return err
		}
		log.Warn("announcing the sidecar failed; retrying", "error", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// launchNodeSidecar starts the node's sidecar through the wrapper, retrying while the state
// directory's ledger is still locked by a predecessor that is shutting down (a SIGKILLed host's
// sidecar gets SIGTERM and kills and reaps its workers first).
func launchNodeSidecar(ctx context.Context, cfg NodeConfig, log hclog.Logger) (*host.Client, error) {
	var env []string
	for _, kv := range storecfg.WithoutEnvKeys(os.Environ()) {
		if !strings.HasPrefix(kv, NodeConfigEnv+"=") {
			env = append(env, kv)
		}
	}
	// The sidecar's own keys come from the credentials file in cfg.SidecarArgs.
	env = append(env, "STEWARD_CAMPAIGN_BIN="+cfg.Steward, "STEWARD_CAMPAIGN_SIDECAR_LOG="+cfg.SidecarLog)
	if cfg.SidecarTemp != "" {
		env = append(env, "TMPDIR="+cfg.SidecarTemp) // the last of duplicate keys wins
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := host.LaunchStdio(lctx, host.Config{Path: cfg.Wrapper, Args: cfg.SidecarArgs, Env: env,
			Logger: log.Named("sidecar"), KillGrace: 25 * time.Second})
		cancel()
		if err == nil {
			if iso := c.Info().Isolation; iso == nil || !iso.Verified {
				c.Close()
				return nil, fmt.Errorf("%w: %+v", ErrIsolation, iso)
			}
			return c, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("launch the sidecar: %w", err)
		}
		log.Info("sidecar launch failed; retrying", "error", err)
		time.Sleep(time.Second)
	}
}

// serveCommands answers the campaign's commands on in until EOF.
func serveCommands(ctx context.Context, in io.Reader, w *lineWriter, sc *host.Client, d *dispatch.Dispatcher) error {
	lines := bufio.NewScanner(in)
	lines.Buffer(make([]byte, 64<<10), 1<<20)
	for lines.Scan() {
		cmd, arg, _ := strings.Cut(lines.Text(), " ")
		switch cmd {
		case cmdStatus:
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			var st rpc.ObjectsStatusResult
			err := sc.Call(cctx, rpc.MethodObjectsStatus, rpc.ObjectsStatusParams{}, &st)
			cancel()
			if err != nil {
				w.line(lineStatus, "-1", "-1", err.Error())
				continue
			}
			w.line(lineStatus, fmt.Sprint(st.Ledger.Used), fmt.Sprint(st.Ledger.Unsettled))
		case cmdSegmented:
			submitSegmented(ctx, arg, w, d)
		}
	}
	return lines.Err()
}

// submitSegmented admits the segmented job of a "segmented" command and answers JOB or NOJOB.
func submitSegmented(ctx context.Context, arg string, w *lineWriter, d *dispatch.Dispatcher) {
	var req dispatch.SegmentedRequest
	if err := json.Unmarshal([]byte(arg), &req); err != nil {
		w.line(lineNoJob, "-", noJobInvalid, err.Error())
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
	j, err := d.SubmitSegmented(cctx, req)
	cancel()
	switch {
	case err == nil:
		w.line(lineJob, j.ID)
	case errors.Is(err, dispatch.ErrJobExists):
		w.line(lineNoJob, req.ID, noJobExists, err.Error())
	case errors.Is(err, dispatch.ErrInvalidJob):
		w.line(lineNoJob, req.ID, noJobInvalid, err.Error())
	default:
		w.line(lineNoJob, req.ID, noJobFailed, err.Error())
	}
}

// sendReporter is the node's sidecar with a SEND line before each mutate: the last point before
// the wire, so the campaign counts sends from the host side too.
type sendReporter struct {
	*host.Client
	w *lineWriter
}

var _ dispatch.Sidecar = (*sendReporter)(nil)

func (s *sendReporter) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	s.w.line(lineSend, p.InvocationID, p.JobID)
	return s.Client.Mutate(ctx, p)
}

// lineWriter writes whole protocol lines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(fields ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, f := range fields {
		if i > 0 {
			io.WriteString(l.w, " ")
		}
		io.WriteString(l.w, strings.ReplaceAll(f, "\n", " ")) // an error's text is one line too
	}
	io.WriteString(l.w, "\n")
}

// NodeMain is the whole of a failover host process: its NodeConfig from the environment, JSON
// log lines to stderr, the line protocol on stdin and stdout. It returns the process's exit code:
// 0 after stdin ends, 2 without a usable NodeConfig, 1 when the node fails.
func NodeMain(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	cfg, err := NodeConfigFromEnv()
	if err != nil {
		fmt.Fprintln(stderr, "campaign node:", err)
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: cfg.Name, Level: hclog.Info, Output: stderr, JSONFormat: true})
	if err := RunNode(ctx, cfg, stdin, stdout, log); err != nil {
		log.Error("host process failed", "error", err)
		return 1
	}
	return 0
}

// NodeConfigFromEnv reads the NodeConfig the campaign handed this process.
func NodeConfigFromEnv() (NodeConfig, error) {
	var cfg NodeConfig
	v := os.Getenv(NodeConfigEnv)
	if v == "" {
		return cfg, fmt.Errorf("%w: %s is not set (a failover host process is started by the campaign)", ErrConfig, NodeConfigEnv)
	}
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		return cfg, fmt.Errorf("%w: %s: %w", ErrConfig, NodeConfigEnv, err)
	}
	if cfg.Name == "" || len(cfg.Endpoints) == 0 || cfg.Wrapper == "" || cfg.Steward == "" {
		return cfg, errors.Join(ErrConfig, errors.New("node config lacks a name, endpoints, wrapper or steward"))
	}
	return cfg, nil
}

// sidecarWrapper runs the sidecar with its stderr appended to a file of the campaign's: the
// sidecar's own log, written by the sidecar itself, counted even when its host dies.
const sidecarWrapper = `#!/bin/sh
exec "$STEWARD_CAMPAIGN_BIN" "$@" 2>>"$STEWARD_CAMPAIGN_SIDECAR_LOG"
`

func writeWrapper(dir string) (string, error) {
	p := filepath.Join(dir, "sidecar.sh")
	return p, os.WriteFile(p, []byte(sidecarWrapper), 0o755)
}
