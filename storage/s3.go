package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// s3PartSize is minio-go's part size for the uploads it splits itself (known length, or
// put-if-absent of unknown length).
const s3PartSize = 16 << 20

// S3Store keeps objects in one bucket of an S3-compatible server through minio-go.
// PutIfAbsent sends If-None-Match: * (PutObjectOptions.SetMatchETagExcept("*")); the server
// answers 412 to every writer but the first, which becomes ErrExists.
type S3Store struct {
	client        *minio.Client
	bucket        string
	partSize      int // of a streamed upload (Put of unknown length)
	partsInFlight int // part buffers of one streamed upload
	// unsignedPayload: streamed parts go without SigV4 payload signing, with a CRC32C.
	unsignedPayload bool
}

var _ Store = (*S3Store)(nil)

// NewS3Store connects to cfg.Endpoint and makes sure cfg.Bucket exists. cfg.Prefix is not
// applied here (OpenStore does that).
func NewS3Store(ctx context.Context, cfg StoreConfig) (*S3Store, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("%w: s3 store needs an endpoint and a bucket", ErrInvalidConfig)
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	retries := cfg.MaxRetries
	if retries <= 0 {
		retries = 3
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:     cfg.Secure,
		Region:     region,
		MaxRetries: retries,
		Transport:  newTransport(timeout),
	})
	if err != nil {
		// minio.New fails only on a malformed endpoint; its message carries no secret.
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	s := &S3Store{
		client: client, bucket: cfg.Bucket, partSize: defaultPartSize, partsInFlight: defaultPartsInFlight,
		unsignedPayload: cfg.UnsignedPayload,
	}
	if cfg.PartSize > 0 {
		s.partSize = max(cfg.PartSize, minPartSize)
	}
	if cfg.PartsInFlight > 0 {
		s.partsInFlight = cfg.PartsInFlight
	}
	if err := s.ensureBucket(ctx, region); err != nil {
		return nil, err
	}
	return s, nil
}

func newTransport(timeout time.Duration) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

func (s *S3Store) ensureBucket(ctx context.Context, region string) error {
	ok, err := s.client.BucketExists(ctx, s.bucket)
	if err != nil {
		return s3Err("open", s.bucket, err)
	}
	if ok {
		return nil
	}
	err = s.client.MakeBucket(ctx, s.bucket, minio.MakeBucketOptions{Region: region})
	if err != nil && !isCode(err, "BucketAlreadyOwnedByYou", "BucketAlreadyExists") {
		return s3Err("open", s.bucket, err)
	}
	return nil
}

// Bucket returns the bucket name.
func (s *S3Store) Bucket() string { return s.bucket }

// Client exposes the minio client for tests and tools that need bucket administration.
func (s *S3Store) Client() *minio.Client { return s.client }

func (s *S3Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, "put", key, r, size, minio.PutObjectOptions{})
}

func (s *S3Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	opts := minio.PutObjectOptions{}
	opts.SetMatchETagExcept("*")
	return s.put(ctx, "put-if-absent", key, r, size, opts)
}

func (s *S3Store) put(ctx context.Context, op, key string, r io.Reader, size int64, opts minio.PutObjectOptions) error {
	if err := checkKey(op, key); err != nil {
		return err
	}
	opts.PartSize = s3PartSize
	opts.ContentType = "application/octet-stream"
	var err error
	if size < 0 && op == "put" {
		// minio-go would drop put-if-absent's condition from a multipart upload's
		// completion, so only a plain put is streamed here.
		err = s.putStream(ctx, key, r, opts)
	} else {
		_, err = s.client.PutObject(ctx, s.bucket, key, r, size, opts)
	}
	switch {
	case errors.Is(err, errTooManyParts):
		return opErr(op, key, ErrRejected, err)
	case err != nil:
		return s3Err(op, key, err)
	}
	return nil
}

func (s *S3Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.get(ctx, key, minio.GetObjectOptions{}, -1)
}

func (s *S3Store) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if off < 0 || length < 0 {
		return nil, opErr("get", key, ErrCorrupt, fmt.Errorf("bad range [%d,+%d)", off, length))
	}
	if length == 0 {
		if _, err := s.Stat(ctx, key); err != nil {
			return nil, err
		}
		return io.NopCloser(eofReader{}), nil
	}
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(off, off+length-1); err != nil {
		return nil, opErr("get", key, ErrCorrupt, err)
	}
	return s.get(ctx, key, opts, length)
}

// get issues the GET eagerly (minio-go's GetObject is lazy) so that "not found" and
// "unreachable" surface here rather than on the first Read.
func (s *S3Store) get(ctx context.Context, key string, opts minio.GetObjectOptions, want int64) (io.ReadCloser, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	core := minio.Core{Client: s.client}
	body, info, _, err := core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, s3Err("get", key, err)
	}
	size := want
	if size < 0 {
		size = info.Size // Content-Length of the whole object; -1 if the server sent none
	}
	return &s3Body{rc: body, key: key, want: want, size: size}, nil
}

// s3Body classifies errors in the middle of a body and checks that a range came back whole.
type s3Body struct {
	rc   io.ReadCloser
	key  string
	want int64 // bytes expected, or -1
	size int64 // length announced by the server, or -1
	got  int64
}

var _ sizedBody = (*s3Body)(nil)

func (b *s3Body) objectSize() int64 { return b.size }

func (b *s3Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.got += int64(n)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		if b.want >= 0 && b.got < b.want {
			return n, opErr("get", b.key, ErrCorrupt, fmt.Errorf("range short: %d of %d bytes", b.got, b.want))
		}
	default:
		return n, s3Err("get", b.key, err)
	}
	return n, err
}

func (b *s3Body) Close() error { return b.rc.Close() }

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

func (s *S3Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	if err := checkKey("stat", key); err != nil {
		return ObjectInfo{}, err
	}
	info, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s3Err("stat", key, err)
	}
	return ObjectInfo{Key: info.Key, Size: info.Size, ModTime: info.LastModified}, nil
}

func (s *S3Store) List(ctx context.Context, prefix string) iter.Seq2[ObjectInfo, error] {
	return func(yield func(ObjectInfo, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // stops minio-go's listing goroutine if the caller breaks early
		for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if obj.Err != nil {
				yield(ObjectInfo{}, s3Err("list", prefix, obj.Err))
				return
			}
			if !yield(ObjectInfo{Key: obj.Key, Size: obj.Size, ModTime: obj.LastModified}, nil) {
				return
			}
		}
		if err := ctx.Err(); err != nil {
			yield(ObjectInfo{}, opErr("list", prefix, ErrUnavailable, err))
		}
	}
}

func (s *S3Store) DeleteBatch(ctx context.Context, keys []string) []DeleteResult {
	out := make([]DeleteResult, len(keys))
	for start := 0; start < len(keys); start += MaxDeleteBatch {
		end := min(start+MaxDeleteBatch, len(keys))
		s.deleteChunk(ctx, keys[start:end], out[start:end])
	}
	return out
}

// deleteChunk sends one multi-object delete. A key the server did not report on keeps an
// ErrUnavailable result: its fate is unknown.
func (s *S3Store) deleteChunk(ctx context.Context, keys []string, out []DeleteResult) {
	pending := make(map[string][]int, len(keys))
	ch := make(chan minio.ObjectInfo, len(keys))
	for i, k := range keys {
		out[i].Key = k
		if err := checkKey("delete", k); err != nil {
			out[i].Err = err
			continue
		}
		out[i].Err = opErr("delete", k, ErrUnavailable, errors.New("no answer from server"))
		if len(pending[k]) == 0 {
			ch <- minio.ObjectInfo{Key: k}
		}
		pending[k] = append(pending[k], i)
	}
	close(ch)
	if len(pending) == 0 {
		return
	}
	for res := range s.client.RemoveObjectsWithResult(ctx, s.bucket, ch, minio.RemoveObjectsOptions{}) {
		var err error
		if res.Err != nil && !isCode(res.Err, "NoSuchKey", "NoSuchVersion") {
			err = s3Err("delete", res.ObjectName, res.Err)
		}
		for _, i := range pending[res.ObjectName] {
			out[i].Err = err
		}
		delete(pending, res.ObjectName)
	}
}

func isCode(err error, codes ...string) bool {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	for _, c := range codes {
		if resp.Code == c {
			return true
		}
	}
	return false
}

// s3Err classifies a minio-go error. minio's ErrorResponse carries no credentials; url.Error
// messages carry the endpoint and key only (requests are signed in headers, not the URL).
func s3Err(op, key string, err error) error {
	var resp minio.ErrorResponse
	if errors.As(err, &resp) && (resp.Code != "" || resp.StatusCode != 0) {
		switch {
		case resp.StatusCode == http.StatusPreconditionFailed || resp.Code == "PreconditionFailed":
			return opErr(op, key, ErrExists, err)
		case resp.Code == "NoSuchKey" || resp.Code == "NoSuchBucket" || resp.StatusCode == http.StatusNotFound:
			return opErr(op, key, ErrNotFound, err)
		case resp.Code == "InvalidRange" || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
			return opErr(op, key, ErrCorrupt, err)
		case resp.Code == "AccessDenied" || resp.Code == "InvalidAccessKeyId" ||
			resp.Code == "SignatureDoesNotMatch" || resp.StatusCode == http.StatusForbidden:
			return opErr(op, key, ErrPermission, err)
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.Code == "SlowDown":
			return opErr(op, key, ErrUnavailable, err)
		}
		return opErr(op, key, ErrRejected, err)
	}
	var netErr net.Error
	var urlErr *url.Error
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &netErr), errors.As(err, &urlErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return opErr(op, key, ErrUnavailable, err)
	}
	// Anything else (a local read error from the upload body, an unexpected client error):
	// we cannot tell whether the server acted, so it is unavailable, not a verdict.
	return opErr(op, key, ErrUnavailable, err)
}
