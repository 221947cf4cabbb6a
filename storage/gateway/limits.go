package gateway

import (
	"bufio"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cba1309c/steward/storage"
)

// errQuota: the invocation's byte or object bound was reached.
var errQuota = errors.New("gateway: invocation quota exhausted")

// admit counts one new object of size bytes (-1: unknown) against the quotas and takes custody
// of key before any of its bytes is forwarded.
func (g *Gateway) admit(ctx context.Context, key string, size int64) *s3Error {
	g.mu.Lock()
	switch {
	case g.objects >= g.lim.MaxObjects:
		g.mu.Unlock()
		return errf(http.StatusForbidden, "QuotaExceeded", fmt.Sprintf("the invocation may create at most %d objects", g.lim.MaxObjects))
	case size > 0 && g.rec.Bytes+size > g.lim.MaxBytes:
		g.mu.Unlock()
		return errf(http.StatusForbidden, "QuotaExceeded", fmt.Sprintf("the invocation may write at most %d bytes", g.lim.MaxBytes))
	}
	g.objects++
	g.mu.Unlock()
	if g.cfg.Custody == nil {
		return nil
	}
	if err := g.cfg.Custody.Reserve(ctx, key); err != nil {
		return errf(http.StatusForbidden, "AccessDenied", "custody refused the key: "+err.Error())
	}
	return nil
}

// charge counts n written bytes, failing past the invocation's bound.
func (g *Gateway) charge(n int64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rec.Bytes += n
	if g.rec.Bytes > g.lim.MaxBytes {
		return fmt.Errorf("%w: more than %d bytes written", errQuota, g.lim.MaxBytes)
	}
	return nil
}

// metered charges every byte read from r; past the bound the read fails and so does the upload.
func (g *Gateway) metered(r io.Reader) io.Reader { return &meter{g: g, r: r} }

type meter struct {
	g *Gateway
	r io.Reader
}

func (m *meter) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if n > 0 {
		if qerr := m.g.charge(int64(n)); qerr != nil {
			return n, qerr
		}
	}
	return n, err
}

func (g *Gateway) created(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.written[key]; !ok {
		g.written[key] = struct{}{}
		g.rec.Written = append(g.rec.Written, key)
	}
}

func (g *Gateway) wroteKey(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.written[key]
	return ok
}

// stat describes key, from a bounded cache for the immutable folders: a column scan reads
// ranges of the same few files, and each range needs the object's size.
func (g *Gateway) stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	folder, _, _ := strings.Cut(strings.TrimPrefix(key, g.base), "/")
	cacheable := folder == "data" || folder == "_indices" || folder == "_deletions"
	if cacheable {
		if info, ok := g.sizes.get(key); ok {
			return info, nil
		}
	}
	info, err := g.cfg.Upstream.Stat(ctx, key)
	if err == nil && cacheable {
		g.sizes.put(key, info)
	}
	return info, err
}

// sizeCache is a bounded map of object descriptions; full, it starts over.
type sizeCache struct {
	mu sync.Mutex
	m  map[string]storage.ObjectInfo
}

const sizeCacheEntries = 8192

func (c *sizeCache) get(key string) (storage.ObjectInfo, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	info, ok := c.m[key]
	return info, ok
}

func (c *sizeCache) put(key string, info storage.ObjectInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= sizeCacheEntries {
		c.m = make(map[string]storage.ObjectInfo)
	}
	c.m[key] = info
}

// tokenBucket shapes the request rate.
type tokenBucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, burst int) tokenBucket {
	return tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
}

func (b *tokenBucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// maxXMLBody bounds the XML bodies the gateway parses (multi-delete, complete-upload).
const maxXMLBody = 2 << 20

func decodeXML(r *http.Request, v any) *s3Error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxXMLBody+1))
	if err != nil || len(b) > maxXMLBody {
		return errf(http.StatusBadRequest, "MalformedXML", "the XML body is unreadable or larger than 2 MiB")
	}
	if err := xml.Unmarshal(b, v); err != nil {
		return errf(http.StatusBadRequest, "MalformedXML", "the XML body does not parse")
	}
	return nil
}

// requestBody returns the payload of a PUT and its length (-1: unknown), decoding the
// aws-chunked framing of streaming SigV4 uploads (minio-go uses it over plain http).
func requestBody(r *http.Request) (io.Reader, int64, *s3Error) {
	sha := r.Header.Get("X-Amz-Content-Sha256")
	if !strings.HasPrefix(sha, "STREAMING-") && !strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") {
		return r.Body, r.ContentLength, nil
	}
	size := int64(-1)
	if s := r.Header.Get("X-Amz-Decoded-Content-Length"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return nil, 0, errf(http.StatusBadRequest, "InvalidArgument", "x-amz-decoded-content-length is not a length")
		}
		size = n
	}
	return &chunkedReader{r: bufio.NewReaderSize(r.Body, 4096)}, size, nil
}

// chunkedReader decodes aws-chunked: `<hex size>[;chunk-signature=…]\r\n<bytes>\r\n`, …, a
// zero-size chunk, then optional trailers. Chunk signatures are not checked (only the domain
// reaches the gateway; the transport is a loopback in its own network namespace).
type chunkedReader struct {
	r    *bufio.Reader
	left int64
	done bool
}

var errChunked = errors.New("gateway: malformed aws-chunked body")

func (c *chunkedReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		if err := c.next(); err != nil {
			return 0, err
		}
	}
	n, err := c.r.Read(p[:min(int64(len(p)), c.left)])
	c.left -= int64(n)
	if c.left == 0 && err == nil {
		err = c.crlf()
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func (c *chunkedReader) next() error {
	line, err := c.r.ReadSlice('\n')
	if err != nil || len(line) < 3 || line[len(line)-2] != '\r' {
		return fmt.Errorf("%w: chunk header", errChunked)
	}
	hexSize, _, _ := strings.Cut(string(line[:len(line)-2]), ";")
	n, err := strconv.ParseInt(hexSize, 16, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("%w: chunk size %q", errChunked, hexSize)
	}
	if n == 0 {
		c.done = true // trailers, if any, follow; the payload is complete
		return nil
	}
	c.left = n
	return nil
}

func (c *chunkedReader) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(c.r, b[:]); err != nil || b != [2]byte{'\r', '\n'} {
		return fmt.Errorf("%w: chunk not followed by CRLF", errChunked)
	}
	return nil
}
