package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
)

// FuzzParseRange: whatever the Range header, a satisfiable answer lies inside the object.
func FuzzParseRange(f *testing.F) {
	for _, s := range []string{"", "bytes=0-0", "bytes=10-", "bytes=-5", "bytes=5-2", "bytes=0-1,4-5", "bytes=99999999999999999999-", "items=0-1"} {
		f.Add(s, int64(100))
	}
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -size
		}
		off, n, partial, e := parseRange(h, size)
		if e != nil {
			return
		}
		if off < 0 || n < 0 || off+n > size || (!partial && (off != 0 || n != size)) {
			t.Fatalf("parseRange(%q, %d) = %d, %d, %v: outside the object", h, size, off, n, partial)
		}
	})
}

// FuzzChunkedReader: an aws-chunked body decodes to exactly its payload, and garbage ends in an
// error, never a panic or an endless read.
func FuzzChunkedReader(f *testing.F) {
	f.Add([]byte("hello, world"), 5, []byte("5;chunk-signature=ab\r\nhello\r\n0\r\n\r\n"))
	f.Add([]byte{}, 1, []byte("zz\r\n"))
	f.Fuzz(func(t *testing.T, payload []byte, chunk int, raw []byte) {
		if chunk <= 0 || chunk > 1<<16 {
			chunk = 7
		}
		var enc bytes.Buffer
		for rest := payload; len(rest) > 0; {
			n := min(chunk, len(rest))
			fmt.Fprintf(&enc, "%x;chunk-signature=00\r\n", n)
			enc.Write(rest[:n])
			enc.WriteString("\r\n")
			rest = rest[n:]
		}
		enc.WriteString("0;chunk-signature=00\r\n\r\n")
		got, err := io.ReadAll(&chunkedReader{r: bufio.NewReader(&enc)})
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("round trip: %d bytes (%v), want %d", len(got), err, len(payload))
		}
		out, _ := io.ReadAll(io.LimitReader(&chunkedReader{r: bufio.NewReader(bytes.NewReader(raw))}, int64(len(raw))+1))
		if len(out) > len(raw) {
			t.Fatalf("decoded %d bytes out of %d", len(out), len(raw))
		}
	})
}

// FuzzCleanKey: a key the gateway calls clean has no segment that could leave its folder.
func FuzzCleanKey(f *testing.F) {
	for _, s := range []string{"a/b", "a/../b", "a//b", "./a", "a\\b", "a\x00b", "ds/data/x.parquet"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if !cleanKey(key) {
			return
		}
		for seg := range strings.SplitSeq(key, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.ContainsAny(seg, "\\\x00") {
				t.Fatalf("cleanKey(%q) accepted segment %q", key, seg)
			}
		}
	})
}
