package rpc_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cba1309c/steward/rpc"
)

// TestStoreSpecRefused: every spec the grammar refuses fails validation, wrapping ErrInvalidStore.
// Before the one parser, the first five validated and were then opened somewhere else.
func TestStoreSpecRefused(t *testing.T) {
	const ep = "127.0.0.1:9000"
	long := "file:///" + strings.Repeat("d", rpc.MaxStoreName)
	for _, tc := range []struct {
		name string
		spec rpc.StoreSpec
	}{
		{"userinfo on s3", rpc.StoreSpec{URL: "s3://u@bucket/x", Endpoint: ep}},
		{"userinfo on file", rpc.StoreSpec{URL: "file://u@/dir"}},
		{"query", rpc.StoreSpec{URL: "s3://bucket/x?versionId=1", Endpoint: ep}},
		{"empty query", rpc.StoreSpec{URL: "file:///dir?"}},
		{"fragment", rpc.StoreSpec{URL: "file:///dir#frag"}},
		{"empty fragment", rpc.StoreSpec{URL: "s3://bucket#", Endpoint: ep}},
		{"double slash in prefix", rpc.StoreSpec{URL: "s3://bucket/a//b", Endpoint: ep}},
		{"double slash after bucket", rpc.StoreSpec{URL: "s3://bucket//", Endpoint: ep}},
		{"double trailing slash", rpc.StoreSpec{URL: "file:///dir//"}},
		{"dotdot in file path", rpc.StoreSpec{URL: "file:///srv/../etc"}},
		{"escaped dotdot", rpc.StoreSpec{URL: "file:///srv/%2E%2E/etc"}},
		{"dot segment", rpc.StoreSpec{URL: "s3://bucket/./x", Endpoint: ep}},
		{"dotdot in prefix", rpc.StoreSpec{URL: "s3://bucket/a/..", Endpoint: ep}},
		{"file relative", rpc.StoreSpec{URL: "file://relative/dir"}},
		{"file opaque", rpc.StoreSpec{URL: "file:relative/dir"}},
		{"file localhost", rpc.StoreSpec{URL: "file://localhost/dir"}},
		{"file empty", rpc.StoreSpec{URL: "file://"}},
		{"no scheme", rpc.StoreSpec{URL: "/abs/dir"}},
		{"other scheme", rpc.StoreSpec{URL: "http://bucket/x", Endpoint: ep}},
		{"empty", rpc.StoreSpec{}},
		{"empty bucket", rpc.StoreSpec{URL: "s3:///prefix", Endpoint: ep}},
		{"bucket with port", rpc.StoreSpec{URL: "s3://bucket:9000/x", Endpoint: ep}},
		{"bucket too short", rpc.StoreSpec{URL: "s3://b", Endpoint: ep}},
		{"bucket with dotdot", rpc.StoreSpec{URL: "s3://a..b", Endpoint: ep}},
		{"s3 opaque", rpc.StoreSpec{URL: "s3:bucket", Endpoint: ep}},
		{"bad escape", rpc.StoreSpec{URL: "file:///a%zz"}},
		{"NUL escaped", rpc.StoreSpec{URL: "file:///a%00b"}},
		{"invalid UTF-8 escaped", rpc.StoreSpec{URL: "s3://bucket/%FF", Endpoint: ep}},
		{"s3 without endpoint", rpc.StoreSpec{URL: "s3://bucket"}},
		{"endpoint with scheme", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "http://127.0.0.1:9000"}},
		{"endpoint with path", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "127.0.0.1:9000/x"}},
		{"endpoint with userinfo", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "ak:sk@127.0.0.1:9000"}},
		{"endpoint with empty port", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "minio:"}},
		{"endpoint port out of range", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "minio:70000"}},
		{"endpoint bare IPv6", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "::1"}},
		{"region with space", rpc.StoreSpec{URL: "s3://bucket", Endpoint: ep, Region: "us east"}},
		{"endpoint on file", rpc.StoreSpec{URL: "file:///dir", Endpoint: ep}},
		{"secure on file", rpc.StoreSpec{URL: "file:///dir", Secure: true}},
		{"region on file", rpc.StoreSpec{URL: "file:///dir", Region: "eu-west-1"}},
		{"name over the ledger bound", rpc.StoreSpec{URL: long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if !errors.Is(err, rpc.ErrInvalidStore) {
				t.Fatalf("Validate(%+v) = %v, want an error wrapping ErrInvalidStore", tc.spec, err)
			}
		})
	}
}

// TestStoreErrorsHoldNoCredential: a host that pastes keys into the URL gets a refusal that
// quotes none of it, whichever part of the parser catches it.
func TestStoreErrorsHoldNoCredential(t *testing.T) {
	const ak, sk = "AKIAEXAMPLEKEY", "s3cr3tEXAMPLEvalue"
	for _, raw := range []string{
		"s3://" + ak + ":" + sk + "@bucket/x", // userinfo
		"s3://" + ak + ":" + sk + "/x",        // a "port" that is a secret
		ak + ":" + sk + "@bucket",             // scheme and opaque
		"s3://" + ak + ":" + sk + "@bucket/x?y", "file://" + ak + ":" + sk + "@/x%zz",
	} {
		err := rpc.StoreSpec{URL: raw, Endpoint: "127.0.0.1:9000"}.Validate()
		if err == nil {
			t.Fatalf("%q validated", raw)
		}
		if msg := strings.ToLower(err.Error()); strings.Contains(msg, strings.ToLower(ak)) || strings.Contains(msg, strings.ToLower(sk)) {
			t.Fatalf("error quotes a credential: %v", err)
		}
	}
}

// TestParseStoreURLCanonical: what is accepted, what it decodes to, and the one canonical URL
// and name every spelling of it renders.
func TestParseStoreURLCanonical(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     rpc.StoreSpec
		want     rpc.ParsedStore
		url      string
		nameWant string
	}{
		{"file", rpc.StoreSpec{URL: "file:///var/data"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/var/data"}, "file:///var/data", "file:///var/data"},
		{"file trailing slash", rpc.StoreSpec{URL: "file:///var/data/"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/var/data"}, "file:///var/data", "file:///var/data"},
		{"file root", rpc.StoreSpec{URL: "file:///"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/"}, "file:///", "file:///"},
		{"file one slash", rpc.StoreSpec{URL: "file:/var/data"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/var/data"}, "file:///var/data", "file:///var/data"},
		{"file %20 decoded once", rpc.StoreSpec{URL: "file:///tmp/my%20data"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/tmp/my data"}, "file:///tmp/my%20data", "file:///tmp/my%20data"},
		{"file %2520 is a literal %20", rpc.StoreSpec{URL: "file:///tmp/my%2520data"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/tmp/my%20data"}, "file:///tmp/my%2520data", "file:///tmp/my%2520data"},
		{"file raw space", rpc.StoreSpec{URL: "file:///tmp/my data"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/tmp/my data"}, "file:///tmp/my%20data", "file:///tmp/my%20data"},
		{"file at sign escaped", rpc.StoreSpec{URL: "file:///tmp/with@sign"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/tmp/with@sign"}, "file:///tmp/with%40sign", "file:///tmp/with%40sign"},
		{"scheme case", rpc.StoreSpec{URL: "FILE:///x"},
			rpc.ParsedStore{Kind: rpc.StoreFile, Root: "/x"}, "file:///x", "file:///x"},
		{"s3 bucket", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "127.0.0.1:9000"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Endpoint: "127.0.0.1:9000"},
			"s3://bucket", "s3://bucket@127.0.0.1:9000"},
		{"s3 bucket slash", rpc.StoreSpec{URL: "s3://bucket/", Endpoint: "127.0.0.1:9000"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Endpoint: "127.0.0.1:9000"},
			"s3://bucket", "s3://bucket@127.0.0.1:9000"},
		{"s3 prefix trailing slash", rpc.StoreSpec{URL: "s3://bucket/team/a/", Endpoint: "MinIO.internal:09000"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Prefix: "team/a", Endpoint: "minio.internal:9000"},
			"s3://bucket/team/a", "s3://bucket/team/a@minio.internal:9000"},
		{"s3 escaped prefix", rpc.StoreSpec{URL: "s3://bucket/a%20b/c%2Fd", Endpoint: "h:1"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Prefix: "a b/c/d", Endpoint: "h:1"},
			"s3://bucket/a%20b/c/d", "s3://bucket/a%20b/c/d@h:1"},
		{"s3 at sign in prefix", rpc.StoreSpec{URL: "s3://bucket/a@b", Endpoint: "h:1"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Prefix: "a@b", Endpoint: "h:1"},
			"s3://bucket/a%40b", "s3://bucket/a%40b@h:1"},
		{"s3 secure region default port", rpc.StoreSpec{URL: "s3://bucket/p", Endpoint: "s3.example.com:443", Secure: true, Region: "eu-west-1"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Prefix: "p", Endpoint: "s3.example.com", Secure: true, Region: "eu-west-1"},
			"s3://bucket/p", "s3://bucket/p@s3.example.com;secure;region=eu-west-1"},
		{"s3 port 80 plain", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "minio:80"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Endpoint: "minio"}, "s3://bucket", "s3://bucket@minio"},
		{"s3 port 443 plain is kept", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "minio:443"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Endpoint: "minio:443"}, "s3://bucket", "s3://bucket@minio:443"},
		{"s3 IPv6", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "[0:0::1]:9000", Region: "r1"},
			rpc.ParsedStore{Kind: rpc.StoreS3, Bucket: "bucket", Endpoint: "[::1]:9000", Region: "r1"},
			"s3://bucket", "s3://bucket@[::1]:9000;region=r1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tc.spec.Parse()
			if err != nil {
				t.Fatalf("Parse(%+v): %v", tc.spec, err)
			}
			if p != tc.want || p.URL() != tc.url || p.Name() != tc.nameWant {
				t.Fatalf("Parse(%+v) = %+v, url %q, name %q; want %+v, %q, %q", tc.spec, p, p.URL(), p.Name(), tc.want, tc.url, tc.nameWant)
			}
			back, err := rpc.ParseStoreName(p.Name())
			if err != nil || back != p {
				t.Fatalf("ParseStoreName(%q) = %+v, %v; want %+v", p.Name(), back, err, p)
			}
		})
	}
}

// TestParseStoreNameLegacy: names written before canonical names still resolve; malformed ones
// do not.
func TestParseStoreNameLegacy(t *testing.T) {
	for name, want := range map[string]rpc.ParsedStore{
		"file:///tmp/with@sign":          {Kind: rpc.StoreFile, Root: "/tmp/with@sign"},
		"s3://bucket/deep/prefix@h:9000": {Kind: rpc.StoreS3, Bucket: "bucket", Prefix: "deep/prefix", Endpoint: "h:9000"},
		"s3://bucket/a@b/@h:9000":        {Kind: rpc.StoreS3, Bucket: "bucket", Prefix: "a@b", Endpoint: "h:9000"},
	} {
		if got, err := rpc.ParseStoreName(name); err != nil || got != want {
			t.Errorf("ParseStoreName(%q) = %+v, %v; want %+v", name, got, err, want)
		}
	}
	for _, bad := range []string{"", "s3://bucket", "relative/path", "http://x@y", "s3://bucket@h:1;", "s3://bucket@h:1;region=",
		"s3://bucket@h:1;region=r;secure", "s3://bucket@h:1;secure;secure", "s3://bucket@h:1;tls"} {
		if _, err := rpc.ParseStoreName(bad); !errors.Is(err, rpc.ErrInvalidStore) {
			t.Errorf("ParseStoreName(%q) = %v, want ErrInvalidStore", bad, err)
		}
	}
}

// FuzzParseStoreURL: parsing never panics, and whatever parses is a fixed point of its canonical
// forms: the canonical spec and the store name both parse back to the same store, within bounds.
func FuzzParseStoreURL(f *testing.F) {
	for _, s := range []rpc.StoreSpec{
		{URL: "file:///var/data"}, {URL: "file:///tmp/my%20data/"}, {URL: "s3://u@bucket/x", Endpoint: "h:1"},
		{URL: "s3://bucket/a?b#c", Endpoint: "h:1"}, {URL: "s3://bucket/team/a/", Endpoint: "MinIO:09000", Secure: true, Region: "eu-1"},
		{URL: "s3://bucket/%40;x", Endpoint: "[::1]:80"}, {URL: "file:/x//y"}, {URL: "file:///%2e%2e"},
	} {
		f.Add(s.URL, s.Endpoint, s.Secure, s.Region)
	}
	f.Fuzz(func(t *testing.T, raw, endpoint string, secure bool, region string) {
		spec := rpc.StoreSpec{URL: raw, Endpoint: endpoint, Secure: secure, Region: region}
		p, err := spec.Parse()
		if err != nil {
			if !errors.Is(err, rpc.ErrInvalidStore) {
				t.Fatalf("error %v does not wrap ErrInvalidStore", err)
			}
			return
		}
		canon := p.Spec()
		again, err := canon.Parse()
		if err != nil || again != p || again.Spec() != canon {
			t.Fatalf("canonical spec %+v of %+v parses to %+v, %v", canon, spec, again, err)
		}
		named, err := rpc.ParseStoreName(p.Name())
		if err != nil || named != p {
			t.Fatalf("name %q of %+v parses to %+v, %v", p.Name(), spec, named, err)
		}
		if len(p.Name()) > rpc.MaxStoreName || strings.ContainsAny(p.URL(), "?#") {
			t.Fatalf("canonical forms out of bounds: %q %q", p.URL(), p.Name())
		}
	})
}

func ExampleStoreSpec_Parse() {
	p, err := rpc.StoreSpec{URL: "s3://warehouse/team%20a/", Endpoint: "MinIO.internal:9000"}.Parse()
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Bucket, p.Prefix)
	fmt.Println(p.Name())
	_, err = rpc.StoreSpec{URL: "s3://user@warehouse", Endpoint: "minio:9000"}.Parse()
	fmt.Println(errors.Is(err, rpc.ErrInvalidStore))
	// Output:
	// warehouse team a
	// s3://warehouse/team%20a@minio.internal:9000
	// true
}
