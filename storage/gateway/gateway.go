// Package gateway serves one invocation's engine the S3 API for exactly one dataset: the only
// way an engine reaches storage (docs/ENGINE.md §4.3). It forwards to an upstream
// storage.Store opened with the sidecar's authority, so the engine holds no credential, no
// store directory and no route to the store.
//
// What it serves, and nothing else (anything else is an S3 error, logged):
//   - GET (with ranges), HEAD and ListObjectsV2 of keys under the dataset;
//   - PUT of new keys in the dataset's writable folders, always create-only upstream; custody
//     of each key is taken (Custodian) before its first byte is forwarded;
//   - the commit: PUT of the manifest of version pinned+1 only, after the sidecar's claim of
//     that slot (storage/slot) naming the manifest's bytes is in storage; then Lance's version
//     hint, naming exactly that version;
//   - multipart uploads (parts staged in a private directory of the sidecar's), CopyObject
//     within the dataset, DELETE of what this invocation wrote.
//
// Quotas (bytes, objects, request rate) are enforced here, where they are observable. The
// gateway refuses to know about engines, ledgers or the wire protocol.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/storage"
	"github.com/hashicorp/go-hclog"
)

// Custodian keeps custody of what the invocation writes.
type Custodian interface {
	// Reserve takes custody of key for the invocation before any byte of it is written; an
	// error refuses the write (nothing is forwarded).
	Reserve(ctx context.Context, key string) error
	// Release gives custody of key up: its create-only upload found the key taken, so the
	// object there is another writer's and must never be deleted as the invocation's.
	Release(ctx context.Context, key string) error
}

// Limits bound one invocation. Zero fields take the defaults.
type Limits struct {
	// MaxBytes bounds the bytes the invocation writes (puts, parts and copies). Default 16 GiB.
	MaxBytes int64
	// MaxObjects bounds the objects it creates (puts, copies and completed uploads). Default 10,000.
	MaxObjects int
	// RequestsPerSecond and Burst shape the request rate (a token bucket). Default 2,000 and 4,000.
	RequestsPerSecond float64
	Burst             int
	// MaxManifest bounds the commit manifest, which is held in memory to be hashed. Default 64 MiB.
	MaxManifest int64
	// MaxUploads bounds the multipart uploads open at once. Default 64.
	MaxUploads int
	// MaxConnections bounds the connections served at once; more wait in the listener's backlog,
	// in the domain's own network namespace, holding none of the sidecar's descriptors. Default 256
	// (Lance issues up to 64 requests at once to a cloud store; an idle connection is closed after
	// 15 s, so one that waits is served then at the latest).
	MaxConnections int
}

// Default limits.
const (
	DefaultMaxBytes          = 16 << 30
	DefaultMaxObjects        = 10_000
	DefaultRequestsPerSecond = 2000
	DefaultMaxManifest       = 64 << 20
	DefaultMaxUploads        = 64
	DefaultMaxConnections    = 256
	maxParts                 = 10_000
)

// WithDefaults fills the zero fields with their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = DefaultMaxObjects
	}
	if l.RequestsPerSecond <= 0 {
		l.RequestsPerSecond = DefaultRequestsPerSecond
	}
	if l.Burst <= 0 {
		l.Burst = int(2 * l.RequestsPerSecond)
	}
	if l.MaxManifest <= 0 {
		l.MaxManifest = DefaultMaxManifest
	}
	if l.MaxUploads <= 0 {
		l.MaxUploads = DefaultMaxUploads
	}
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	return l
}

// WritableFolders are the folders of a dataset where an engine may create objects: data files,
// index segments and Lance's transaction files. Never _versions/ (but the commit slot's
// manifest), _steward/ (the sidecar's claims), _deletions/ or anything else.
var WritableFolders = []string{"data", "_indices", "_transactions"}

// Config configures a Gateway. Upstream, Bucket, Dataset, Invocation, AccessKey and StageDir
// are required.
type Config struct {
	// Upstream is the store, opened with the sidecar's authority; keys are store-relative.
	Upstream storage.Store
	// Bucket is the name the engine addresses (path-style); any other bucket is NoSuchBucket.
	Bucket string
	// Dataset is the dataset's store-relative path: every key served is under Dataset + "/".
	Dataset string
	// Invocation is the id the commit claim names.
	Invocation string
	// Pinned is the admitted version: only the manifest of Pinned+1 may be written.
	Pinned int64
	// AccessKey is the per-invocation key id the engine signs with; a request with another is
	// refused. (Only the domain can reach the gateway; the key catches a misdirected client.)
	AccessKey string
	// Custody reserves each new key before its first byte. Default: none (tests of the S3
	// surface only).
	Custody Custodian
	// StageDir is a private directory of the sidecar's for multipart parts; the gateway
	// removes what it put there at Close.
	StageDir string
	// Limits bound the invocation.
	Limits Limits
	// BuildArea, when set, is one more dataset-relative folder (ending in "/") where the
	// invocation may create objects: its segment build's own area, _steward/builds/<build>/.
	// Default: none.
	BuildArea string
	// NoCommit refuses every manifest, the commit slot's too: the invocation builds a segment or
	// trains, and publishes nothing. Default: false.
	NoCommit bool
	// Logger receives every refusal. Default: null.
	Logger hclog.Logger
}

// Errors of New.
var ErrInvalidConfig = errors.New("gateway: invalid configuration")

// Gateway is one invocation's S3 endpoint. Serve it on a listener only the invocation's domain
// can reach; Close it once the domain is reaped, then read its Record.
type Gateway struct {
	cfg    Config
	lim    Limits
	log    hclog.Logger
	base   string // Dataset + "/"
	srv    *http.Server
	ctx    context.Context // ends at Close: every upstream call derives from it
	cancel context.CancelFunc

	mu       sync.Mutex
	closed   bool
	sealed   bool // the invocation answered: nothing more is written
	inflight sync.WaitGroup
	rec      Record
	written  map[string]struct{} // keys this invocation created (DELETE is allowed for these)
	objects  int                 // objects admitted, against Limits.MaxObjects
	uploads  map[string]*upload
	sizes    sizeCache
	bucket   tokenBucket
}

// SlotState says what became of the invocation's commit.
type SlotState int

// Slot states, in the order a commit goes through them.
const (
	SlotNone      SlotState = iota // no manifest of pinned+1 was offered
	SlotRefused                    // offered, but the claim or the create-only put lost: not committed
	SlotAmbiguous                  // claimed, and the manifest's put ended without an answer
	SlotLanded                     // claimed, and the store acknowledged the manifest
)

func (s SlotState) String() string {
	return [...]string{"none", "refused", "ambiguous", "landed"}[s]
}

// Record is what the gateway saw the invocation do. Final once Close returned.
type Record struct {
	Slot        SlotState
	SlotKey     string // the manifest key offered for pinned+1
	Written     []string
	Bytes       int64
	Requests    int64
	Refusals    int64
	LastRefusal string
}

// New checks cfg and returns a Gateway that serves nothing until Serve.
func New(cfg Config) (*Gateway, error) {
	switch {
	case cfg.Upstream == nil, cfg.Bucket == "", cfg.Invocation == "", cfg.AccessKey == "", cfg.StageDir == "":
		return nil, fmt.Errorf("%w: Upstream, Bucket, Invocation, AccessKey and StageDir are required", ErrInvalidConfig)
	case cfg.Pinned < 0:
		return nil, fmt.Errorf("%w: negative pinned version", ErrInvalidConfig)
	}
	ds := strings.Trim(cfg.Dataset, "/")
	if ds == "" || !cleanKey(ds) {
		return nil, fmt.Errorf("%w: dataset %q is not a clean relative path", ErrInvalidConfig, cfg.Dataset)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	g := &Gateway{cfg: cfg, lim: cfg.Limits.WithDefaults(), log: log, base: ds + "/",
		written: map[string]struct{}{}, uploads: map[string]*upload{}}
	g.bucket = newTokenBucket(g.lim.RequestsPerSecond, g.lim.Burst)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.srv = &http.Server{
		Handler: http.HandlerFunc(g.serveHTTP),
		// A client that trickles its headers (slow-loris) holds a connection for 10 s at most.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       15 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return g.ctx },
		ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	return g, nil
}

// Serve answers requests on ln until Close; it returns nil after Close. At most
// Limits.MaxConnections connections are open at once: an engine cannot spend the sidecar's
// descriptors.
func (g *Gateway) Serve(ln net.Listener) error {
	err := g.srv.Serve(newLimitListener(ln, g.lim.MaxConnections))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Close stops serving, cancels every upstream call in flight and waits for its handler, and
// removes the staged parts. After Close no write of this invocation can start or land through
// the gateway. Idempotent.
func (g *Gateway) Close() error {
	g.mu.Lock()
	already := g.closed
	g.closed = true
	g.mu.Unlock()
	if already {
		return nil
	}
	err := g.srv.Close()
	g.cancel()
	g.inflight.Wait()
	g.mu.Lock()
	for id := range g.uploads {
		delete(g.uploads, id)
	}
	g.mu.Unlock()
	if rmErr := os.RemoveAll(g.cfg.StageDir); rmErr != nil && err == nil {
		err = rmErr
	}
	return err
}

// Seal refuses every write from now on: the engine has answered, and after its answer it writes
// nothing more (docs/ENGINE.md §3), whatever a lingering process of its domain tries. Writes
// already in flight finish and are recorded.
func (g *Gateway) Seal() {
	g.mu.Lock()
	g.sealed = true
	g.mu.Unlock()
}

// Record returns what the gateway saw; final once Close returned.
func (g *Gateway) Record() Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rec
	r.Written = slices.Clone(r.Written)
	slices.Sort(r.Written)
	return r
}

// enter admits one request, or reports that the gateway is closed; sealed says writes are over.
func (g *Gateway) enter() (ok, sealed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false, true
	}
	g.inflight.Add(1)
	g.rec.Requests++
	return true, g.sealed
}

func (g *Gateway) refuse(w http.ResponseWriter, r *http.Request, e *s3Error) {
	g.note(r, e)
	writeError(w, r, e)
}

// note counts and logs a refusal.
func (g *Gateway) note(r *http.Request, e *s3Error) {
	g.mu.Lock()
	g.rec.Refusals++
	g.rec.LastRefusal = e.Code + ": " + e.Message
	g.mu.Unlock()
	g.log.Warn("gateway refused a request", "invocation", g.cfg.Invocation, "method", r.Method,
		"path", truncate(r.URL.Path, 256), "code", e.Code, "reason", e.Message)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
