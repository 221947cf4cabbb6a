package hostile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// s3raw is the hostile engine's own client of its storage gateway: raw HTTP/1.1 on one TCP
// connection, so that it can send what no SDK would (encoded separators, control characters,
// foreign copy sources, a header trickled byte by byte). The gateway reads the access key id of
// a SigV4 Authorization header; the signature is never computed here.
type s3raw struct {
	addr   string // host:port of the gateway
	bucket string
	ak     string

	mu   sync.Mutex
	conn net.Conn
	br   *bufio.Reader
}

// reply is one response, or the error that stood in for it.
type reply struct {
	status int
	code   string // the S3 error code of an error body
	body   []byte
	err    error
}

func (p reply) ok() bool { return p.err == nil && p.status >= 200 && p.status < 300 }

func (p reply) String() string {
	if p.err != nil {
		return "error " + p.err.Error()
	}
	if p.code != "" {
		return fmt.Sprintf("%d %s", p.status, p.code)
	}
	return strconv.Itoa(p.status)
}

var codeRE = regexp.MustCompile(`<Code>([^<]*)</Code>`)

// do sends one request (target is the raw request-target, starting with "/") and reads its
// answer. A broken connection is dialled again once.
func (c *s3raw) do(method, target string, hdr map[string]string, body []byte) reply {
	return c.send(method, target, hdr, bytes.NewReader(body), int64(len(body)))
}

// send is do with a streamed body: size -1 sends it chunked (no length known in advance).
func (c *s3raw) send(method, target string, hdr map[string]string, body io.Reader, size int64) reply {
	c.mu.Lock()
	defer c.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if c.conn == nil {
			conn, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
			if err != nil {
				return reply{err: err}
			}
			c.conn, c.br = conn, bufio.NewReader(conn)
		}
		p, sent := c.roundTrip(method, target, hdr, body, size)
		if p.err != nil {
			c.conn.Close()
			c.conn = nil
			if !sent && attempt == 0 {
				continue // the server had closed the idle connection
			}
		}
		return p
	}
}

func (c *s3raw) roundTrip(method, target string, hdr map[string]string, body io.Reader, size int64) (reply, bool) {
	_ = c.conn.SetDeadline(time.Now().Add(60 * time.Second))
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, c.addr)
	if c.ak != "" {
		fmt.Fprintf(&b, "Authorization: AWS4-HMAC-SHA256 Credential=%s/20260101/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=%s\r\n",
			c.ak, strings.Repeat("0", 64))
	}
	b.WriteString("X-Amz-Date: 20260101T000000Z\r\nX-Amz-Content-Sha256: UNSIGNED-PAYLOAD\r\n")
	for k, v := range hdr {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if size >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", size)
	} else {
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	}
	if _, err := c.conn.Write(b.Bytes()); err != nil {
		return reply{err: err}, false
	}
	var err error
	if size >= 0 {
		_, err = io.CopyN(c.conn, body, size)
	} else {
		cw := newChunkWriter(c.conn)
		if _, err = io.Copy(cw, body); err == nil {
			err = cw.close()
		}
	}
	// A server that refuses early may close before the body is through: its answer still counts.
	resp, rerr := http.ReadResponse(c.br, &http.Request{Method: method})
	if rerr != nil {
		if err == nil {
			err = rerr
		}
		return reply{err: err}, true
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	p := reply{status: resp.StatusCode, body: out}
	if m := codeRE.FindSubmatch(out); m != nil {
		p.code = string(m[1])
	}
	if resp.Close {
		c.conn.Close()
		c.conn = nil
	}
	return p, true
}

// chunkWriter writes HTTP/1.1 chunked transfer coding.
type chunkWriter struct{ w io.Writer }

func newChunkWriter(w io.Writer) *chunkWriter { return &chunkWriter{w: w} }

func (c *chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if _, err := fmt.Fprintf(c.w, "%x\r\n", len(p)); err != nil {
		return 0, err
	}
	n, err := c.w.Write(p)
	if err == nil {
		_, err = io.WriteString(c.w, "\r\n")
	}
	return n, err
}

func (c *chunkWriter) close() error {
	_, err := io.WriteString(c.w, "0\r\n\r\n")
	return err
}

// close drops the connection.
func (c *s3raw) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
		c.conn = nil
	}
}

// obj is the request-target of key in the client's bucket, the key sent as is.
func (c *s3raw) obj(key string) string { return "/" + c.bucket + "/" + key }

// zeros is a reader of n zero bytes.
func zeros(n int64) io.Reader { return io.LimitReader(zeroReader{}, n) }

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// errNoGateway: the request names no gateway (no store endpoint or no key).
var errNoGateway = errors.New("the request names no storage gateway")
