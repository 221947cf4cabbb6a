package campaign

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/host/dispatch"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storecfg"
)

// node is one place a sidecar runs (one database node), known to the dispatcher by name. A
// SIGKILLed sidecar is replaced by a successor on the same state directory under the same name.
type node struct {
	name string
	r    *run

	mu  sync.Mutex
	cur *sidecar
}

// sidecar is a real sidecar as the dispatcher sees it, with the campaign's send-side injection
// in front of Mutate: it is the wire between host and sidecar, where a fault campaign is allowed
// to tighten a deadline or pull a plug.
type sidecar struct {
	*host.Client
	node     *node
	inflight atomic.Int64
}

var _ dispatch.Sidecar = (*sidecar)(nil)

// Mutate injects the job's send-side fault, then sends.
func (s *sidecar) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	p, stepFault := s.node.r.onSend(s, p)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	res, err := s.Client.Mutate(ctx, p)
	if stepFault != "" {
		s.node.r.stepAnswered(p, stepFault, res, err)
	}
	return res, err
}

// sidecarArgs are the flags of every campaign sidecar: faults on, a short kill ladder, a small
// worker memory limit, the campaign's own cgroup parent and state directory.
func (r *run) sidecarArgs() []string {
	var engine []string
	if r.cfg.Engine == EngineLance {
		engine = []string{"--engine", EngineLance + "=" + r.cfg.Lance.engineCommand()}
	}
	return append(engine, "--test-faults", "--cgroup-parent", r.cgroupParent, "--state-dir", r.stateDir,
		"--term-grace", termGrace.String(), "--reap-bound", reapBound.String(), "--clock-skew", clockSkew.String(),
		"--min-runnable", minRunnable.String(), "--worker-memory", strconv.Itoa(workerMemory),
		"--executors", strconv.Itoa(r.cfg.Executors), "--shutdown-grace", "20s", "--log-level", "info",
		"--s3-credentials-file", r.credsFile, "--allow-store", r.storeName)
}

// sidecarTemp is the sidecars' TMPDIR on Lance: each sidecar keeps its worker domains' private
// temp dirs (removed after their reap) in its own steward-<pid>-<start> dir there, and a
// successor sweeps a SIGKILLed one's; teardown counts what is left (leftoverTemp).
func (r *run) sidecarTemp() string { return filepath.Join(r.dir, "sidecar-tmp") }

// launch starts one sidecar over stdio. The sidecar's own S3 credentials (index.resolve,
// cleanup, recovery) come from its credentials file (sidecarArgs); jobs carry per-call
// credentials besides.
func (n *node) launch(ctx context.Context) (*sidecar, error) {
	r := n.r
	env := storecfg.WithoutEnvKeys(os.Environ())
	if r.cfg.Engine == EngineLance {
		if err := os.MkdirAll(r.sidecarTemp(), 0o711); err != nil { // searchable by the workers' guest uid
			return nil, err
		}
		env = append(env, "TMPDIR="+r.sidecarTemp())
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := host.LaunchStdio(ctx, host.Config{
		Path: r.cfg.Steward, Args: r.sidecarArgs(), Env: env, Logger: r.log.Named(n.name),
		KillGrace: 25 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	if iso := c.Info().Isolation; iso == nil || !iso.Verified {
		c.Close()
		return nil, fmt.Errorf("%w: %w: %+v", ErrSetup, ErrIsolation, iso)
	}
	return &sidecar{Client: c, node: n}, nil
}

// start launches the node's first sidecar and adds it to the dispatcher.
func (n *node) start(ctx context.Context) error {
	s, err := n.launch(ctx)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.cur = s
	n.mu.Unlock()
	return n.r.d.AddSidecar(n.name, s)
}

// current returns the node's live sidecar.
func (n *node) current() *sidecar {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur
}

// kill SIGKILLs victim if it is still the node's sidecar, then starts a successor on the same
// state directory and adds it under the same name. It reports whether the kill was delivered
// and whether the victim was running a mutation at that moment.
func (n *node) kill(ctx context.Context, victim *sidecar) (delivered, busy bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cur != victim {
		return false, false, nil // already replaced by an earlier kill
	}
	busy = victim.inflight.Load() > 0
	if err := sigkill(victim.Client); err != nil {
		return false, busy, err
	}
	<-victim.Exited()
	victim.Close()
	var s *sidecar
	for attempt := 0; ; attempt++ {
		if s, err = n.launch(ctx); err == nil {
			break
		}
		if attempt == 4 || ctx.Err() != nil {
			return true, busy, fmt.Errorf("restart %s after SIGKILL: %w", n.name, err)
		}
		time.Sleep(time.Second)
	}
	n.cur = s
	return true, busy, n.r.d.AddSidecar(n.name, s)
}

// sigkill kills the sidecar process through a pidfd (os.FindProcess on Linux). The sidecar is
// the campaign's own child, reaped only by host's waiter: the pid can be recycled only in the
// instant between that reap and Exited closing, which the check before FindProcess narrows to
// nothing a campaign will meet. host.Client has no Kill of its own (Close is graceful).
func sigkill(c *host.Client) error {
	select {
	case <-c.Exited():
		return errors.New("sidecar already exited")
	default:
	}
	p, err := os.FindProcess(c.Pid())
	if err != nil {
		return err
	}
	defer p.Release()
	return p.Signal(syscall.SIGKILL)
}

// stop closes the node's sidecar gracefully (stdin EOF: it kills and reaps its workers and exits).
func (n *node) stop() {
	n.mu.Lock()
	s := n.cur
	n.mu.Unlock()
	if s != nil {
		s.Close()
	}
}
