package sidecar

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/isolation"
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
)

// gatewayPort is where every contained domain finds its storage gateway: 127.0.0.1 in the
// domain's own network namespace, which holds nothing else.
const gatewayPort = 7480

// gatewayBucket is the bucket name an engine addresses; its keys are the store's own
// (store-relative, starting with the dataset's path).
const gatewayBucket = "steward"

// gatewayOpenTimeout bounds opening the upstream store and taking the domain's listener.
const gatewayOpenTimeout = 10 * time.Second

// invocationGateway is one invocation's storage gateway, served for the session's life.
type invocationGateway struct {
	gw         *gateway.Gateway
	invocation string
	live       *liveGateways
	ln         net.Listener
	done       chan error
	reach      rpc.DatasetRef   // the dataset as the engine addresses it
	creds      *rpc.Credentials // the engine's per-invocation key: good at this gateway only
}

// openGateway serves j's dataset to domain dom: upstream with the sidecar's authority (the
// call's keys, or its own for an allowed store), on the listener the domain handed over (a
// domain born without one, uncontained, gets a loopback listener of the sidecar's). Custody of
// each object is taken as it is written.
func (s *Server) openGateway(j *job, dom *isolation.Domain) (_ *invocationGateway, retErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), gatewayOpenTimeout)
	defer cancel()
	up, err := s.openStore(ctx, j.store, j.creds)
	if err != nil {
		return nil, fmt.Errorf("open the dataset's store: %w", err)
	}
	var ln net.Listener
	if s.contained() {
		ln, err = dom.Gateway(ctx)
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, fmt.Errorf("the domain's gateway listener: %w", err)
	}
	defer func() {
		if retErr != nil {
			ln.Close()
		}
	}()
	stage, err := os.MkdirTemp(s.tempDir, "gateway-")
	if err != nil {
		return nil, fmt.Errorf("gateway staging dir: %w", err)
	}
	ak, sk := "STEWARD"+strings.ToUpper(randomHex(8)), randomHex(20)
	gw, err := gateway.New(gateway.Config{
		Upstream: up, Bucket: gatewayBucket, Dataset: j.p.Dataset.Path, Invocation: j.p.InvocationID,
		Pinned: j.p.PinnedVersion, AccessKey: ak, Custody: gatewayCustody{s, j}, StageDir: stage,
		Limits: s.cfg.Gateway, Logger: s.log.Named("gateway").With("invocation", j.p.InvocationID),
		BuildArea: segmentArea(j), NoCommit: j.p.Op == rpc.OpTrain || j.p.Op == rpc.OpSegment,
	})
	if err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	ig := &invocationGateway{gw: gw, invocation: j.p.InvocationID, ln: ln, done: make(chan error, 1), creds: &rpc.Credentials{AccessKey: ak, SecretKey: sk}}
	ig.reach = rpc.DatasetRef{Path: j.p.Dataset.Path, Store: rpc.StoreSpec{URL: "s3://" + gatewayBucket,
		Endpoint: ln.Addr().(*net.TCPAddr).AddrPort().String(), Region: "us-east-1"}}
	if s.contained() {
		// The address the listener reports is the domain's own loopback, as the engine dials it.
		ig.reach.Store.Endpoint = "127.0.0.1:" + strconv.Itoa(gatewayPort)
	}
	ig.live = &s.gateways
	ig.live.add(j.p.InvocationID)
	go func() { ig.done <- gw.Serve(ln) }() // owned by the session: close waits for it
	return ig, nil
}

// close stops the gateway once the domain is reaped and returns what it saw: final, since no
// request of the invocation can start or land any more.
func (ig *invocationGateway) close() gateway.Record {
	if ig == nil {
		return gateway.Record{}
	}
	_ = ig.gw.Close()
	<-ig.done
	ig.live.remove(ig.invocation)
	return ig.gw.Record()
}

// seal refuses the invocation's writes from now on (its engine has answered).
func (ig *invocationGateway) seal() {
	if ig != nil {
		ig.gw.Seal()
	}
}

// liveGateways counts the open gateways by invocation: resolve answers UNKNOWN for an
// invocation whose claimed manifest may still go through one.
type liveGateways struct {
	mu sync.Mutex
	m  map[string]int
}

func (l *liveGateways) add(inv string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[string]int{}
	}
	l.m[inv]++
}

func (l *liveGateways) remove(inv string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m[inv]--; l.m[inv] <= 0 {
		delete(l.m, inv)
	}
}

// running reports whether invocation inv's gateway is open in this sidecar.
func (s *Server) running(inv string) bool {
	s.gateways.mu.Lock()
	defer s.gateways.mu.Unlock()
	return s.gateways.m[inv] > 0
}

// storageReport is hello's storage: every engine reaches its store through its gateway.
func (s *Server) storageReport() *rpc.StorageReport {
	r := &rpc.StorageReport{Mode: "gateway", Reach: "loopback", WorkerDiskBytes: s.cfg.Gateway.MaxBytes,
		WorkerObjects: s.cfg.Gateway.MaxObjects, RequestsPerSecond: s.cfg.Gateway.RequestsPerSecond}
	if s.contained() {
		r.Reach, r.Endpoint = "domain", "127.0.0.1:"+strconv.Itoa(gatewayPort)
	}
	return r
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// gatewayCustody takes custody of each key the gateway is about to create, for the job's
// invocation (custody checks it is a new name under the dataset's data and index folders).
type gatewayCustody struct {
	s *Server
	j *job
}

func (c gatewayCustody) Reserve(ctx context.Context, key string) error {
	return c.s.reserve(c.j, []string{key}, nil)
}

func (c gatewayCustody) Release(ctx context.Context, key string) error {
	if c.s.custody == nil {
		return nil
	}
	return c.s.custody.Release(ctx, invocationOf(c.j), []string{key})
}

// decide is the invocation's outcome once its domain is reaped and its gateway closed, from the
// gateway's record and storage, never from the engine: no manifest offered (or one refused)
// is NOT_COMMITTED without a read (the gateway was the only way to the store); one that landed
// is read back; an unanswered one is decided from storage (storage/slot.Decide).
func (s *Server) decide(j *job, rec gateway.Record) (slot.Verdict, error) {
	switch rec.Slot {
	case gateway.SlotNone:
		return slot.Verdict{Outcome: slot.NotCommitted, Reason: "no manifest of the slot went through the invocation's gateway"}, nil
	case gateway.SlotRefused:
		return slot.Verdict{Outcome: slot.NotCommitted, Reason: "the invocation's commit was refused: fenced, or another writer committed the version first"}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	st, err := s.openStore(ctx, j.store, j.creds)
	if err != nil {
		return slot.Verdict{}, err
	}
	return custody.Decide(ctx, st, j.p.Dataset.Path, j.p.PinnedVersion, j.p.InvocationID, j.eng.builtin(), false)
}

// confirmed turns the engine's account into the answer storage stands behind (docs/ENGINE.md
// §4.2): an engine's word about a commit counts only where decide agrees. A claimed commit
// storage does not hold, a commit the engine denies, an IF_*_NOOP the request did not ask for
// and any NATIVE_RETURN whose outcome storage cannot tell yet become INDETERMINATE -23
// (index.resolve then answers what storage says).
func (s *Server) confirmed(j *job, res rpc.MutateResult, v slot.Verdict, derr error) rpc.MutateResult {
	if res.Phase != rpc.PhaseNativeReturn {
		return res
	}
	committed := res.Code == rpc.NativeOK && res.CommittedVersion != 0
	var why string
	switch {
	case derr != nil:
		why = "storage could not be read to confirm the outcome: " + s.sanitize(j, derr.Error())
	case v.Outcome == slot.Unknown:
		why = "storage cannot tell the outcome yet: " + v.Reason
	case committed && res.CommittedVersion != j.p.PinnedVersion+1:
		why = fmt.Sprintf("the engine claims a commit at version %d; it may commit only at %d", res.CommittedVersion, j.p.PinnedVersion+1)
	case committed && v.Outcome != slot.Committed:
		why = "the engine reports a commit and storage holds none: " + v.Reason
	case !committed && v.Outcome == slot.Committed:
		why = "storage holds the invocation's commit, and the engine reports none"
	case res.Code == rpc.NativeOK && !committed && !noopAsked(j.p, res.CompletionReason):
		why = fmt.Sprintf("the engine answers %q, which the request did not ask for", res.CompletionReason)
	default:
		return res
	}
	s.log.Error("the engine's account is not what storage says: answered indeterminate", "invocation", j.p.InvocationID,
		"engine", j.eng.name, "code", res.Code, "claimed_version", res.CommittedVersion, "why", why)
	res.Phase, res.Code, res.CompletionReason, res.CommittedVersion = rpc.PhaseIndeterminate, rpc.ReasonUnconfirmedCommit, "", 0
	res.Message = "the engine's account is not confirmed by storage: " + why
	return res
}

// noopAsked reports whether an OK without a commit is one the request allows: IF_NOT_EXISTS_NOOP
// for a CREATE with if_not_exists, IF_EXISTS_NOOP for a DROP with if_exists, ALREADY_OPTIMIZED for
// an OPTIMIZE.
func noopAsked(p rpc.MutateParams, reason string) bool {
	switch reason {
	case rpc.CompletionIfNotExistsNoop:
		return p.IfNotExists
	case rpc.CompletionIfExistsNoop:
		return p.IfExists
	case rpc.CompletionAlreadyOptimized:
		return p.Op == rpc.OpOptimize
	case rpc.CompletionTrained:
		return p.Op == rpc.OpTrain
	case rpc.CompletionSegmentWritten:
		return p.Op == rpc.OpSegment
	}
	return false
}

// errNoGateway: the store could not be served to the domain; nothing ran.
var errNoGateway = errors.New("the dataset's store could not be served to the worker")
