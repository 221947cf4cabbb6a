// Package enginetest runs an engine executable as steward would, without a sidecar: a child with
// fd 3 = harness→engine and fd 4 = engine→harness, stdin /dev/null, stderr captured, the
// allow-listed environment of docs/ENGINE.md and a private temp dir. Like the sidecar, it serves
// the engine its dataset through a storage gateway of its own (storage/gateway, on a loopback
// listener, over the request's store opened with the test's authority), hands the engine the
// gateway's endpoint and a per-invocation key in place of the store and credentials of the
// request, and closes the gateway once the engine exited; the gateway's Record and the store
// decide the outcome (storage/slot.Decide), never the engine. It speaks engine protocol v1,
// records everything, and enforces the frame rules, so that one contract suite can run against
// any engine (the Lance engine today, the built-in one later). It refuses to be a sidecar: no
// cgroups, no ledger, no redaction, no network namespace.
package enginetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/gateway"
	"github.com/cba1309c/steward/storage/slot"
	"github.com/cba1309c/steward/storecfg"
	"github.com/hashicorp/go-hclog"
)

// Frame bounds of engine protocol v1.
const (
	MaxRequestFrame = 1 << 20  // harness (sidecar) → engine
	MaxEngineFrame  = 64 << 10 // engine → harness (sidecar)
	MaxFrames       = 100_000
)

// The gateway as the engine addresses it: the bucket the sidecar names (its keys are the
// store's own) and the region it gives.
const (
	GatewayBucket = "steward"
	GatewayRegion = "us-east-1"
)

// ErrProtocol is an engine that broke protocol v1 (malformed, oversized, out of order, second answer).
var ErrProtocol = errors.New("enginetest: protocol violation")

// Engine is how to start one engine process.
type Engine struct {
	Argv []string // argv[0] is an absolute path; no $PATH lookup
	Env  []string // extra variables on top of the allow-list (tests only; the sidecar adds none)
}

// Hello is the engine's first frame.
type Hello struct {
	PID    int `json:"pid"`
	Engine struct {
		Name       string          `json:"name"`
		Protocol   int             `json:"protocol"`
		IndexTypes []string        `json:"index_types"`
		Settle     string          `json:"settle"`
		Custody    json.RawMessage `json:"custody"`
		Faults     []string        `json:"faults"`
	} `json:"engine"`
}

// Reserve is one custody request frame. The sidecar grants every one without effect (custody is
// taken by the gateway as each object is written, docs/ENGINE.md §6); so does the harness.
type Reserve struct {
	Seq      int      `json:"seq"`
	Keys     []string `json:"keys"`
	Prefixes []string `json:"prefixes"`
}

// Progress is one progress frame.
type Progress struct {
	Stage string `json:"stage"`
	Done  int64  `json:"done"`
	Total int64  `json:"total"`
}

// Result is the answer to a mutate request.
type Result struct {
	Phase            string `json:"phase"`
	Code             int    `json:"code"`
	ObservedLatest   int64  `json:"observed_latest"`
	CommittedVersion int64  `json:"committed_version"`
	CompletionReason string `json:"completion_reason"`
	Message          string `json:"message"`
	IndexUUID        string `json:"index_uuid"`
}

// Options shape one run. The zero value grants every write.
type Options struct {
	// OnWrite runs when the gateway takes custody of key (store-relative), a new object of the
	// engine's, before its first byte is forwarded: nil grants it, an error refuses the write (the
	// engine sees AccessDenied). The commit's manifest and claim are not objects of the engine's
	// and do not pass here. It runs on the gateway's request goroutine, so it may block to hold
	// the engine at that point.
	OnWrite func(key string) error
	// OnHello runs after hello, before the request is written.
	OnHello func(*Session)
	// Limits bound the session's gateway. Default: the gateway's defaults.
	Limits gateway.Limits
}

// Session is one engine process, what it said and what its gateway saw.
type Session struct {
	Hello    Hello
	Reserves []Reserve
	Progress []Progress
	Result   *Result
	Stderr   bytes.Buffer
	// TempLeft lists what the engine left in its private temp dir (relative paths), read after the
	// process ended and before the dir was removed.
	TempLeft []string
	TempDir  string
	Wall     time.Duration // start → exit
	HelloAt  time.Duration // start → hello

	// Store is the request's store, opened with the request's credentials (the authority the
	// sidecar forwards with); Dataset, Invocation and Pinned are the request's.
	Store      storage.Store
	Dataset    string
	Invocation string
	Pinned     int64
	// Gateway is what the session's gateway saw: final once Wait returned (the gateway is closed
	// after the engine exited, as the sidecar closes it after the reap).
	Gateway gateway.Record
	// GatewayLog holds the gateway's log lines (every refusal, with its reason).
	GatewayLog bytes.Buffer
	// Request is the request as the engine received it (the gateway's reach and key in place
	// of the store and credentials).
	Request map[string]any

	cmd     *exec.Cmd
	mu      sync.Mutex
	custody []string
	gw      *servedGateway
	done    chan struct{}
	err     error
}

// Custody lists the keys the gateway took custody of, in order: what the sidecar's ledger would
// hold tickets for. Final once Wait returned.
func (s *Session) Custody() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.custody...)
}

// Kill SIGKILLs the engine (the harness still reaps it, closes its gateway and records the
// leftovers).
func (s *Session) Kill() { _ = s.cmd.Process.Kill() }

// Wait blocks until the engine exited, its gateway closed and the session is complete.
func (s *Session) Wait() error { <-s.done; return s.err }

// Decide settles the session's commit of version Pinned+1 from storage alone, as the sidecar's
// resolve does once the invocation's gateway is closed (storage/slot.Decide, not live): an
// invocation without a claim is fenced. Call it after Wait.
func (s *Session) Decide(ctx context.Context) (slot.Verdict, error) {
	return slot.Decide(ctx, s.Store, s.Dataset, s.Pinned, s.Invocation, false)
}

// Run starts the engine, sends it one mutate request and waits for the end.
func Run(ctx context.Context, eng Engine, req any, opt Options) (*Session, error) {
	s, err := Start(ctx, eng, req, opt)
	if err != nil {
		return nil, err
	}
	return s, s.Wait()
}

// Start opens the request's store and the session's gateway, starts the engine and returns at
// once; the exchange runs in the background. req is the mutate request as a host sends it to the
// sidecar (invocation_id, pinned_version, dataset with its real store, credentials, ...): the
// engine receives it with the dataset's store and the credentials replaced by the gateway's.
func Start(ctx context.Context, eng Engine, req any, opt Options) (_ *Session, retErr error) {
	m, p, err := decodeRequest(req)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "steward-engine-")
	if err != nil {
		return nil, err
	}
	s := &Session{TempDir: tmp, Dataset: strings.Trim(p.Dataset.Path, "/"), Invocation: p.InvocationID,
		Pinned: p.PinnedVersion, done: make(chan struct{})}
	defer func() {
		if retErr != nil {
			s.gw.close()
			os.RemoveAll(tmp)
		}
	}()
	if s.gw, err = s.openGateway(ctx, p, opt); err != nil {
		return nil, err
	}
	m["dataset"] = s.gw.reach
	m["credentials"] = s.gw.creds
	m["temp_dir"] = tmp
	body, err := json.Marshal(map[string]any{"t": "request", "kind": "mutate", "request": m})
	if err != nil {
		return nil, err
	}
	var sent struct {
		Request map[string]any `json:"request"`
	}
	if err := json.Unmarshal(body, &sent); err != nil {
		return nil, err
	}
	s.Request = sent.Request
	if len(body) > MaxRequestFrame {
		return nil, fmt.Errorf("request of %d bytes exceeds %d", len(body), MaxRequestFrame)
	}
	toEngR, toEngW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fromEngR, fromEngW, err := os.Pipe()
	if err != nil {
		toEngR.Close()
		toEngW.Close()
		return nil, err
	}
	cmd := exec.CommandContext(ctx, eng.Argv[0], eng.Argv[1:]...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=" + tmp, "HOME=" + tmp}, eng.Env...)
	cmd.ExtraFiles = []*os.File{toEngR, fromEngW} // fd 3, fd 4
	cmd.Stderr = &lockedWriter{mu: &s.mu, w: &s.Stderr}
	cmd.Dir = tmp
	start := time.Now()
	if err := cmd.Start(); err != nil {
		toEngR.Close()
		toEngW.Close()
		fromEngR.Close()
		fromEngW.Close()
		return nil, err
	}
	toEngR.Close()
	fromEngW.Close()
	s.cmd = cmd
	go func() {
		defer close(s.done)
		perr := s.converse(toEngW, fromEngR, body, start, opt)
		toEngW.Close()
		fromEngR.Close()
		if perr != nil {
			_ = cmd.Process.Kill()
		}
		werr := cmd.Wait()
		s.Wall = time.Since(start)
		s.Gateway = s.gw.close()
		s.TempLeft = listTree(tmp)
		os.RemoveAll(tmp)
		switch {
		case perr != nil:
			s.err = perr
		case werr != nil:
			s.err = fmt.Errorf("engine exit: %w", werr)
		}
	}()
	return s, nil
}

// decodeRequest reads what the gateway needs from req, and a copy of req to rewrite.
func decodeRequest(req any) (map[string]any, rpc.MutateParams, error) {
	var m map[string]any
	var p rpc.MutateParams
	b, err := json.Marshal(req)
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	switch {
	case err != nil:
		return nil, p, fmt.Errorf("enginetest: request: %w", err)
	case p.InvocationID == "" || p.PinnedVersion < 0:
		return nil, p, errors.New("enginetest: the request needs invocation_id and pinned_version")
	}
	return m, p, nil
}

// servedGateway is the session's gateway on its loopback listener.
type servedGateway struct {
	gw    *gateway.Gateway
	done  chan error
	reach rpc.DatasetRef   // the dataset as the engine addresses it
	creds *rpc.Credentials // the engine's key: good at this gateway only
}

// openGateway serves the request's dataset as sidecar/gateway.go openGateway does for an
// uncontained domain: the request's store opened with its credentials, a loopback listener, a
// fresh key, custody of each object through opt.OnWrite.
func (s *Session) openGateway(ctx context.Context, p rpc.MutateParams, opt Options) (_ *servedGateway, retErr error) {
	cfg, err := storecfg.FromSpec(p.Dataset.Store, p.Credentials)
	if err != nil {
		return nil, fmt.Errorf("enginetest: the request's store: %w", err)
	}
	if s.Store, err = storage.OpenStore(ctx, cfg); err != nil {
		return nil, fmt.Errorf("enginetest: open the request's store: %w", err)
	}
	stage, err := os.MkdirTemp("", "steward-gateway-")
	if err != nil {
		return nil, err
	}
	ak, sk := "STEWARD"+strings.ToUpper(randomHex(8)), randomHex(20)
	log := hclog.New(&hclog.LoggerOptions{Name: "gateway", Output: &lockedWriter{mu: &s.mu, w: &s.GatewayLog}, Level: hclog.Info})
	gw, err := gateway.New(gateway.Config{Upstream: s.Store, Bucket: GatewayBucket, Dataset: p.Dataset.Path,
		Invocation: p.InvocationID, Pinned: p.PinnedVersion, AccessKey: ak, Custody: custodian{s, opt.OnWrite},
		StageDir: stage, Limits: opt.Limits, Logger: log})
	if err != nil {
		os.RemoveAll(stage)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gw.Close()
		return nil, err
	}
	g := &servedGateway{gw: gw, done: make(chan error, 1), creds: &rpc.Credentials{AccessKey: ak, SecretKey: sk},
		reach: rpc.DatasetRef{Path: p.Dataset.Path, Store: rpc.StoreSpec{URL: "s3://" + GatewayBucket,
			Endpoint: ln.Addr().(*net.TCPAddr).AddrPort().String(), Region: GatewayRegion}}}
	go func() { g.done <- gw.Serve(ln) }()
	return g, nil
}

// close stops the gateway and returns its final record.
func (g *servedGateway) close() gateway.Record {
	if g == nil {
		return gateway.Record{}
	}
	_ = g.gw.Close()
	<-g.done
	return g.gw.Record()
}

// custodian records each key the gateway takes custody of and asks the test's hook.
type custodian struct {
	s       *Session
	onWrite func(string) error
}

func (c custodian) Reserve(_ context.Context, key string) error {
	c.s.mu.Lock()
	c.s.custody = append(c.s.custody, key)
	c.s.mu.Unlock()
	if c.onWrite == nil {
		return nil
	}
	return c.onWrite(key)
}

// Release drops key from the session's custody: its upload found the key taken.
func (c custodian) Release(_ context.Context, key string) error {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	for i, k := range c.s.custody {
		if k == key {
			c.s.custody = append(c.s.custody[:i], c.s.custody[i+1:]...)
			break
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Session) converse(w io.Writer, r io.Reader, request []byte, start time.Time, opt Options) error {
	f, err := readFrame(r)
	if err != nil {
		return err
	}
	if f.T != "hello" {
		return fmt.Errorf("%w: first frame is %q, want hello", ErrProtocol, f.T)
	}
	if err := json.Unmarshal(f.raw, &s.Hello); err != nil {
		return fmt.Errorf("%w: hello: %v", ErrProtocol, err)
	}
	s.HelloAt = time.Since(start)
	if err := s.checkHello(); err != nil {
		return err
	}
	if opt.OnHello != nil {
		opt.OnHello(s)
	}
	if err := writeFrame(w, request); err != nil {
		return err
	}
	for n := 0; n < MaxFrames; n++ {
		f, err := readFrame(r)
		if err != nil {
			return err
		}
		switch f.T {
		case "progress":
			var p Progress
			if err := json.Unmarshal(f.raw, &p); err != nil || p.Done < 0 || p.Total < 0 {
				return fmt.Errorf("%w: progress %s", ErrProtocol, f.raw)
			}
			s.Progress = append(s.Progress, p)
		case "reserve":
			var rv Reserve
			if err := json.Unmarshal(f.raw, &rv); err != nil || len(rv.Keys)+len(rv.Prefixes) == 0 || len(rv.Keys) > 1000 || len(rv.Prefixes) > 1000 ||
				slices.ContainsFunc(rv.Prefixes, func(p string) bool { return !strings.HasSuffix(p, "/") }) {
				return fmt.Errorf("%w: reserve %s", ErrProtocol, f.raw)
			}
			if rv.Seq != len(s.Reserves)+1 {
				return fmt.Errorf("%w: reserve seq %d, want %d", ErrProtocol, rv.Seq, len(s.Reserves)+1)
			}
			s.Reserves = append(s.Reserves, rv)
			b, _ := json.Marshal(map[string]any{"t": "reserved", "seq": rv.Seq})
			if err := writeFrame(w, b); err != nil {
				return err
			}
		case "result":
			var env struct {
				Result struct {
					Result
					Created []string `json:"created"`
				} `json:"result"`
			}
			if err := json.Unmarshal(f.raw, &env); err != nil {
				return fmt.Errorf("%w: result: %v", ErrProtocol, err)
			}
			if u := env.Result.IndexUUID; u != "" && !validUUID.MatchString(u) || len(env.Result.Created) > 1000 {
				return fmt.Errorf("%w: result index_uuid %q, %d created keys", ErrProtocol, truncate(u, 80), len(env.Result.Created))
			}
			s.Result = &env.Result.Result
			return expectEOF(r)
		default:
			return fmt.Errorf("%w: unexpected frame %q", ErrProtocol, f.T)
		}
	}
	return fmt.Errorf("%w: more than %d frames", ErrProtocol, MaxFrames)
}

// Declaration and result bounds of docs/ENGINE.md §3 and §3.1.
var (
	validIndexType = regexp.MustCompile(`^[A-Z0-9_]{1,32}$`)
	validUUID      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
)

// checkHello holds the hello to ENGINE.md §3.1: the engine's own pid, protocol 1, 1-64 index
// types of [A-Z0-9_], a settle guarantee the sidecar accepts (without effect), a name of at most
// 64 bytes.
func (s *Session) checkHello() error {
	e := s.Hello.Engine
	switch {
	case s.Hello.PID != s.cmd.Process.Pid:
		return fmt.Errorf("%w: hello pid %d, the engine is %d", ErrProtocol, s.Hello.PID, s.cmd.Process.Pid)
	case e.Protocol != 1:
		return fmt.Errorf("%w: hello protocol %d", ErrProtocol, e.Protocol)
	case len(e.IndexTypes) == 0 || len(e.IndexTypes) > 64 || slices.ContainsFunc(e.IndexTypes, func(t string) bool { return !validIndexType.MatchString(t) }):
		return fmt.Errorf("%w: hello index types %q", ErrProtocol, e.IndexTypes)
	case !slices.Contains([]string{"", "fence", "claim-fence", "none"}, e.Settle):
		return fmt.Errorf("%w: hello settle %q", ErrProtocol, truncate(e.Settle, 80))
	case len(e.Name) > 64:
		return fmt.Errorf("%w: hello name of %d bytes", ErrProtocol, len(e.Name))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// expectEOF: after the answer the engine may only exit.
func expectEOF(r io.Reader) error {
	var b [1]byte
	if n, _ := r.Read(b[:]); n > 0 {
		return fmt.Errorf("%w: bytes after the answer", ErrProtocol)
	}
	return nil
}

type frame struct {
	T   string `json:"t"`
	raw []byte
}

func readFrame(r io.Reader) (frame, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return frame{}, fmt.Errorf("%w: engine ended without an answer: %v", ErrProtocol, err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxEngineFrame {
		return frame{}, fmt.Errorf("%w: frame length %d", ErrProtocol, n)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return frame{}, fmt.Errorf("%w: short frame: %v", ErrProtocol, err)
	}
	f := frame{raw: buf}
	if err := json.Unmarshal(buf, &f); err != nil || f.T == "" {
		return frame{}, fmt.Errorf("%w: malformed frame", ErrProtocol)
	}
	return f, nil
}

func writeFrame(w io.Writer, body []byte) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	_, err := w.Write(append(hdr[:], body...))
	return err
}

func listTree(root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != root {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	return out
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Cmd is the engine's process (for its exit state after Wait).
func (s *Session) Cmd() *exec.Cmd { return s.cmd }
