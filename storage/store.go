// Package storage owns steward's object stores: one small Store interface with two
// implementations, S3 (minio-go, for MinIO and S3-compatible servers) and a local directory
// (the embedded default). Datasets and index segments are built on top of it in
// storage/dataset and storage/index. This package refuses to know about datasets, ledgers or
// any other steward package.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"os"
	"path"
	"strings"
	"time"
)

// MaxDeleteBatch is the largest number of keys sent in one multi-object delete request.
const MaxDeleteBatch = 1000

// Store is a flat namespace of immutable objects addressed by slash-separated keys.
type Store interface {
	// Put writes key, replacing any existing object. size is the exact length of r, or -1.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// PutIfAbsent writes key only if it does not exist; otherwise it fails with ErrExists and
	// leaves the existing object untouched. Of concurrent callers exactly one succeeds.
	PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error
	// Get streams the whole object.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// GetRange streams length bytes starting at off. A range past the end fails with ErrCorrupt
	// (callers ask only for ranges they believe exist).
	GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
	// Stat describes one object.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// List yields every object whose key starts with prefix, in lexical key order.
	List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error]
	// DeleteBatch deletes keys (in requests of at most MaxDeleteBatch) and returns one result per
	// key, in input order. Deleting an absent key is a success.
	DeleteBatch(ctx context.Context, keys []string) []DeleteResult
}

// FileBody is a Get or GetRange body of the local store, backed by a file: a server may send its
// bytes with sendfile(2) (an *io.LimitedReader over the file, seeked to the offset) instead of
// copying them through user space. Reading the body and using its file are exclusive.
type FileBody interface {
	FileRange() (f *os.File, off, length int64)
}

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key     string    // full key
	Size    int64     // bytes
	ModTime time.Time // last modification, as reported by the store
}

// DeleteResult is the outcome for one key of DeleteBatch. Err is nil when the object is gone
// (deleted now or already absent); an error wrapping ErrUnavailable means the outcome is unknown.
type DeleteResult struct {
	Key string
	Err error
}

// Kinds of store accepted by StoreConfig.Kind.
const (
	KindLocal = "local"
	KindS3    = "s3"
)

// StoreConfig selects and configures a Store. Credentials are never printed: String and
// LogValue redact them.
type StoreConfig struct {
	// Kind is KindLocal or KindS3. Default: KindLocal.
	Kind string
	// Root is the directory of a local store; created if missing. Required for KindLocal.
	Root string
	// Endpoint is host[:port] of the S3 server (no scheme). Required for KindS3.
	Endpoint string
	// Bucket holds the objects. Required for KindS3; created by OpenStore if missing.
	Bucket string
	// Prefix is prepended (with a "/") to every key, for both kinds. Default: none.
	Prefix string
	// AccessKey is the S3 access key id. Default: none (anonymous).
	AccessKey string
	// SecretKey is the S3 secret. Never logged or put into an error message.
	SecretKey string
	// Secure selects https. Default: false (plain http, as for a local MinIO).
	Secure bool
	// Region is the S3 region. Default: "us-east-1".
	Region string
	// MaxRetries bounds minio-go's retries of one request. Default: 3 (minio-go's own default
	// of 10 makes an outage take minutes to surface).
	MaxRetries int
	// RequestTimeout bounds one S3 HTTP exchange from dial to response headers. Default: 30s.
	RequestTimeout time.Duration
	// PartSize is the part size, in bytes, of an S3 upload of unknown length (a streamed
	// Put); raised to S3's 5 MiB floor. Default: 8 MiB.
	PartSize int
	// PartsInFlight bounds the parts of one streamed S3 upload held in memory (one filling,
	// the rest on the wire): such an upload buffers at most PartSize*PartsInFlight bytes.
	// Default: 2 (16 MiB: what minio-go's synchronous stream path held in one part).
	PartsInFlight int
	// UnsignedPayload sends the body of a streamed S3 upload without SigV4 payload signing
	// on plain http, which costs a SHA-256 of every byte on both ends (over https the body
	// is never signed: TLS protects it). Each part then carries an x-amz-checksum-crc32c
	// header that the server verifies: corruption is caught, but an attacker on the path
	// could substitute a body with the same CRC. Default: false (signed).
	UnsignedPayload bool
}

// String renders the configuration with the secret redacted.
func (c StoreConfig) String() string {
	secret := ""
	if c.SecretKey != "" {
		secret = "REDACTED"
	}
	return fmt.Sprintf("StoreConfig{Kind:%s Root:%s Endpoint:%s Bucket:%s Prefix:%s AccessKey:%s SecretKey:%s Secure:%t Region:%s}",
		c.Kind, c.Root, c.Endpoint, c.Bucket, c.Prefix, c.AccessKey, secret, c.Secure, c.Region)
}

// GoString keeps %#v from printing the secret.
func (c StoreConfig) GoString() string { return c.String() }

// LogValue implements slog.LogValuer without the secret.
func (c StoreConfig) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("kind", c.Kind), slog.String("root", c.Root), slog.String("endpoint", c.Endpoint),
		slog.String("bucket", c.Bucket), slog.String("prefix", c.Prefix), slog.Bool("secure", c.Secure),
	)
}

// OpenStore builds the Store described by cfg. For S3 it checks that the bucket exists
// (creating it if missing), so an unreachable server fails here with ErrUnavailable.
func OpenStore(ctx context.Context, cfg StoreConfig) (Store, error) {
	var s Store
	var err error
	switch cfg.Kind {
	case KindLocal, "":
		s, err = NewLocalStore(cfg.Root)
	case KindS3:
		s, err = NewS3Store(ctx, cfg)
	default:
		return nil, fmt.Errorf("%w: unknown store kind %q", ErrInvalidConfig, cfg.Kind)
	}
	if err != nil {
		return nil, err
	}
	if cfg.Prefix != "" {
		s = WithPrefix(s, cfg.Prefix)
	}
	return s, nil
}

// ListAll collects List into a slice.
func ListAll(ctx context.Context, s Store, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	for info, err := range s.List(ctx, prefix) {
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// ReadAll reads a whole object into memory, refusing one larger than limit bytes with
// ErrTooLarge. The bound is checked before reading when the store reports the object's size and
// enforced while reading otherwise (a body that never ends, a size that lied): at most limit+1
// bytes are ever read, and the buffer never grows past them.
func ReadAll(ctx context.Context, s Store, key string, limit int64) ([]byte, error) {
	if limit < 0 {
		return nil, opErr("get", key, ErrTooLarge, fmt.Errorf("negative read bound %d", limit))
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	size := int64(-1)
	if sb, ok := rc.(sizedBody); ok {
		size = sb.objectSize()
	} else if info, err := s.Stat(ctx, key); err == nil {
		size = info.Size // a Store wrapper hid the body's size; ask for it
	}
	if size > limit {
		return nil, tooLarge(key, limit, size)
	}
	b, err := readBounded(rc, limit, size)
	if err != nil {
		return nil, opErr("get", key, classifyReadErr(err), err)
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(key, limit, -1)
	}
	return b, nil
}

// readBounded reads r to its end or to limit+1 bytes, whichever comes first. With a size hint
// the buffer is allocated once (one spare byte, so a correct size meets EOF without growing);
// without one it doubles up to limit+1 bytes, so all it ever allocates is under 2*(limit+1).
func readBounded(r io.Reader, limit, hint int64) ([]byte, error) {
	r = io.LimitReader(r, limit+1)
	b := make([]byte, 0, min(max(hint, 511), limit)+1)
	for {
		if int64(len(b)) > limit {
			return b, nil // one byte past the bound is all the caller needs to know
		}
		if len(b) == cap(b) {
			c := 2 * int64(cap(b))
			if 2*c > limit+1 {
				c = limit + 1 // jump to the bound rather than stop just short of it
			}
			nb := make([]byte, len(b), c)
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if errors.Is(err, io.EOF) {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// sizedBody is a Get body that knows the object's length before it is read (-1: unknown).
type sizedBody interface{ objectSize() int64 }

func tooLarge(key string, limit, size int64) error {
	if size < 0 {
		return opErr("get", key, ErrTooLarge, fmt.Errorf("more than the %d-byte bound", limit))
	}
	return opErr("get", key, ErrTooLarge, fmt.Errorf("%d bytes, bound %d", size, limit))
}

// classifyReadErr decides what a failure in the middle of a body means: a cut stream is the
// store going away, not a corrupt object.
func classifyReadErr(err error) error {
	if errors.Is(err, ErrCorrupt) {
		return ErrCorrupt
	}
	return ErrUnavailable
}

// ValidKey reports whether key is acceptable to every Store: non-empty, relative, clean,
// no "." or ".." element, no backslash or NUL.
func ValidKey(key string) bool {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") ||
		strings.ContainsAny(key, "\\\x00") || path.Clean(key) != key {
		return false
	}
	for _, el := range strings.Split(key, "/") {
		if el == "." || el == ".." {
			return false
		}
	}
	return true
}

func checkKey(op, key string) error {
	if !ValidKey(key) {
		return opErr(op, key, ErrInvalidKey, nil)
	}
	return nil
}
