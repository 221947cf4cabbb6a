package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Commits at pinned+1 and fences are put-if-absent writes (If-None-Match: * on S3). On a store
// that ignores the precondition two writers can both "win" a version (lance#6595), so the sidecar
// proves it before the first commit or fence on every S3 store: index.mutate's admission,
// index.resolve and custody's self-fence and recovery all pass through requireCondWrites.

// condWriteProbeTimeout bounds one probe (three storage requests).
const condWriteProbeTimeout = 15 * time.Second

// maxCondWriteStores bounds the verdicts remembered. Stores that ignore the precondition are
// never forgotten; when the memory is full of them, further stores are probed on every call.
const maxCondWriteStores = 1024

type condVerdict int

const (
	condProbing  condVerdict = iota // a probe is running; wait on done
	condHonoured                    // a second put-if-absent was refused: commits and fences are safe
	condIgnored                     // a second put-if-absent succeeded: refused for the sidecar's life
	condFailed                      // the probe did not finish (unreachable, denied): probed again next time
)

type condEntry struct {
	verdict condVerdict
	err     error         // the probe's error for condIgnored and condFailed
	done    chan struct{} // closed when the probe ends
}

// condWrites remembers, per canonical store name (rpc.ParsedStore.Name), whether the store
// honours put-if-absent. A verdict is learnt once per store and process; a probe that could not
// finish is not remembered, so the next call probes again. Concurrent calls share one probe.
type condWrites struct {
	log   hclog.Logger
	probe func(context.Context, storage.Store) error // storage.ProbeConditionalWrites; tests replace it

	mu      sync.Mutex
	entries map[string]*condEntry
	max     int

	probes  *prometheus.CounterVec
	refused prometheus.Gauge
}

func newCondWrites(log hclog.Logger, reg prometheus.Registerer) *condWrites {
	c := &condWrites{log: log, probe: storage.ProbeConditionalWrites, entries: map[string]*condEntry{}, max: maxCondWriteStores}
	c.probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steward_condwrite_probes_total",
		Help: "Conditional-write probes of S3 stores by verdict: honoured, ignored (the store is refused), failed (not finished; probed again).",
	}, []string{"verdict"})
	for _, v := range []string{"honoured", "ignored", "failed"} {
		c.probes.WithLabelValues(v)
	}
	c.refused = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "steward_condwrite_stores_refused",
		Help: "S3 stores this sidecar refuses because they ignore conditional writes.",
	})
	reg.MustRegister(c.probes, c.refused)
	return c
}

// require returns nil once the store called name is known to honour put-if-absent, probing the
// store open returns when it is not known yet. A store that ignores it fails with an error wrapping
// storage.ErrConditionalWritesIgnored, now and on every later call; an unfinished probe with its
// cause (storage.ErrUnavailable, a context error, ...).
func (c *condWrites) require(ctx context.Context, name string, open func(context.Context) (storage.Store, error)) error {
	c.mu.Lock()
	e, ok := c.entries[name]
	if ok {
		c.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return fmt.Errorf("store %s: waiting for its conditional-write probe: %w", name, ctx.Err())
		}
		if e.verdict == condHonoured {
			return nil
		}
		return e.err
	}
	e = &condEntry{verdict: condProbing, done: make(chan struct{})}
	if c.makeRoom() {
		c.entries[name] = e
	}
	c.mu.Unlock()

	e.verdict, e.err = c.run(ctx, name, open)
	c.mu.Lock()
	if e.verdict == condFailed && c.entries[name] == e {
		delete(c.entries, name)
	}
	c.mu.Unlock()
	close(e.done)
	return e.err
}

// makeRoom frees a slot for a new entry, forgetting a store known to be fine (it is probed again
// when next used); false when every entry is a refused store or a running probe. Holds c.mu.
func (c *condWrites) makeRoom() bool {
	if len(c.entries) < c.max {
		return true
	}
	for name, e := range c.entries {
		if isClosed(e.done) && e.verdict == condHonoured {
			delete(c.entries, name)
			return true
		}
	}
	return false
}

// run opens and probes the store and logs and counts the verdict.
func (c *condWrites) run(ctx context.Context, name string, open func(context.Context) (storage.Store, error)) (condVerdict, error) {
	ctx, cancel := context.WithTimeout(ctx, condWriteProbeTimeout)
	defer cancel()
	st, err := open(ctx)
	if err == nil {
		err = c.probe(ctx, st)
	}
	switch {
	case err == nil:
		c.probes.WithLabelValues("honoured").Inc()
		c.log.Info("store honours conditional writes", "store", name)
		return condHonoured, nil
	case errors.Is(err, storage.ErrConditionalWritesIgnored):
		c.probes.WithLabelValues("ignored").Inc()
		c.refused.Inc()
		c.log.Error("store ignores conditional writes (If-None-Match: *): every index.mutate and fence on it is refused for this sidecar's life",
			"store", name)
		return condIgnored, ignoredStoreError{name}
	default:
		c.probes.WithLabelValues("failed").Inc()
		return condFailed, fmt.Errorf("store %s: conditional writes not verified: %w", name, err)
	}
}

// ignoredStoreError is the verdict on a store that ignores conditional writes.
type ignoredStoreError struct{ store string }

func (e ignoredStoreError) Error() string {
	return e.store + " accepted a second If-None-Match: * put of a probe key"
}

func (e ignoredStoreError) Unwrap() error { return storage.ErrConditionalWritesIgnored }

// requireCondWrites checks store p before a commit or a fence: file:// stores honour
// put-if-absent by construction; an S3 store must have passed the probe. st, if not nil, is the
// store already opened for the call; otherwise it is opened with creds when a probe is needed.
func (s *Server) requireCondWrites(ctx context.Context, p rpc.ParsedStore, creds *rpc.Credentials, st storage.Store) error {
	if p.Kind != rpc.StoreS3 {
		return nil
	}
	return s.condWrites.require(ctx, p.Name(), func(ctx context.Context) (storage.Store, error) {
		if st != nil {
			return st, nil
		}
		return s.openStore(ctx, p, creds)
	})
}

// admitStore is the admission check of a call's store, at receive: a refusal is a JSON-RPC
// error (never executed). A store that ignores conditional writes is -32015; one that could not
// be probed (unreachable, access denied) -32013, and the next call probes again. It returns the
// credentials the sidecar reaches the store with (credsFor).
func (s *Server) admitStore(ctx context.Context, p rpc.ParsedStore, creds *rpc.Credentials) (*rpc.Credentials, error) {
	// Before the probe, whose verdict may be cached from a call that brought credentials: a call
	// without them on a store off the allow-list is refused (-32016), whatever the probe says.
	reach, err := s.credsFor(p, creds)
	if err != nil {
		return nil, err
	}
	if err := admitLocal(p); err != nil {
		return nil, err
	}
	err = s.requireCondWrites(ctx, p, creds, nil)
	switch {
	case err == nil:
		return reach, nil
	case errors.Is(err, storage.ErrConditionalWritesIgnored):
		return nil, fmt.Errorf("%w: %s; no mutation runs on this store", rpc.ErrConditionalWritesIgnored, err)
	case errors.Is(err, rpc.ErrInvalidStore), errors.Is(err, storage.ErrInvalidConfig):
		return nil, fmt.Errorf("%w: %s", rpc.ErrInvalidParams, s.sanitizeCreds(creds, err.Error()))
	default:
		return nil, fmt.Errorf("%w: %s", rpc.ErrStorageUnavailable, s.sanitizeCreds(creds, err.Error()))
	}
}

// admitLocal refuses, at receive, a file:// store the sidecar cannot serve through a gateway:
// its root must be a directory the sidecar's own user may read, write and search (the engine
// needs no permission on it at all). The message names the path and what to do.
func admitLocal(p rpc.ParsedStore) error {
	if p.Kind != rpc.StoreFile {
		return nil // s3 stores are probed
	}
	fi, err := os.Stat(p.Root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: store %s: the directory does not exist: create it (steward dataset create makes it with a dataset), or fix the url",
			rpc.ErrInvalidParams, p.Root)
	case err != nil:
		return fmt.Errorf("%w: store %s: %v: the sidecar (uid %d) must be able to search every directory above it",
			rpc.ErrStorageUnavailable, p.Root, err, os.Geteuid())
	case !fi.IsDir():
		return fmt.Errorf("%w: store %s is not a directory: a file:// store is a directory", rpc.ErrInvalidParams, p.Root)
	}
	if err := unix.Access(p.Root, unix.R_OK|unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("%w: store %s: the sidecar's user (uid %d) cannot read and write it (%v): give that user access (chown or chmod), not the workers",
			rpc.ErrStorageUnavailable, p.Root, os.Geteuid(), err)
	}
	return nil
}

// openFencingStore opens a store for custody's fences and slot reads: only once its conditional
// writes are verified.
func (s *Server) openFencingStore(ctx context.Context, p rpc.ParsedStore, creds *rpc.Credentials) (storage.Store, error) {
	st, err := s.openStore(ctx, p, creds)
	if err != nil {
		return nil, err
	}
	if err := s.requireCondWrites(ctx, p, creds, st); err != nil {
		return nil, err
	}
	return st, nil
}

// unfenceable is index.resolve's answer when the store's conditional writes are not verified: a
// fence written there would prove nothing, so the outcome stays UNKNOWN, with the reason. A probe
// that failed for another cause than reachability is an error, as other storage failures are.
func (s *Server) unfenceable(res rpc.ResolveResult, creds *rpc.Credentials, err error) (rpc.ResolveResult, error) {
	msg := s.sanitizeCreds(creds, err.Error())
	switch {
	case errors.Is(err, storage.ErrConditionalWritesIgnored):
		res.Reason = "cannot fence safely: the store ignores conditional writes: " + msg
	case errors.Is(err, storage.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		res.Reason = "storage unreachable: " + msg
	default:
		return res, fmt.Errorf("resolve: %s", msg)
	}
	return res, nil
}
