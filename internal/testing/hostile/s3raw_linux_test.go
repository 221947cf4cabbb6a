package hostile

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestS3RawSendsWhatItSays: the raw client's request-target reaches the server undecoded, its
// access key in a SigV4 header, a body of unknown length chunked; answers of HEAD, errors and a
// closed connection are read back.
func TestS3RawSendsWhatItSays(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.RequestURI+" "+r.Header.Get("Authorization")[:40]+" "+string(b))
		switch {
		case r.Method == http.MethodHead:
			w.WriteHeader(http.StatusForbidden)
		case strings.Contains(r.RequestURI, "deny"):
			w.Header().Set("Connection", "close")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "<Error><Code>AccessDenied</Code></Error>")
		default:
			w.WriteHeader(http.StatusOK)
		}
	}))
	defer srv.Close()
	c := &s3raw{addr: strings.TrimPrefix(srv.URL, "http://"), bucket: "steward", ak: "STEWARDKEY"}
	defer c.close()
	if p := c.do("PUT", c.obj("ds/data/%2E%2E/x"), nil, []byte("body")); !p.ok() {
		t.Fatalf("PUT: %v", p)
	}
	if p := c.send("PUT", c.obj("ds/data/y"), nil, strings.NewReader("streamed"), -1); !p.ok() {
		t.Fatalf("chunked PUT: %v", p)
	}
	if p := c.do("HEAD", "/steward", nil, nil); p.status != http.StatusForbidden {
		t.Fatalf("HEAD: %v", p)
	}
	if p := c.do("GET", c.obj("deny"), nil, nil); p.status != http.StatusForbidden || p.code != "AccessDenied" {
		t.Fatalf("GET deny: %v", p)
	}
	if p := c.do("GET", c.obj("after-close"), nil, nil); !p.ok() {
		t.Fatalf("GET after a closed connection: %v", p)
	}
	want := []string{
		"PUT /steward/ds/data/%2E%2E/x AWS4-HMAC-SHA256 Credential=STEWARDKEY/2 body",
		"PUT /steward/ds/data/y AWS4-HMAC-SHA256 Credential=STEWARDKEY/2 streamed",
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("request %d: %q, want %q", i, got[i], w)
		}
	}
}
