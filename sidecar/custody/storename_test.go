package custody

import (
	"errors"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage/ledger"
)

// The ledger keeps only a store's name; after a restart without the journaled spec the cleanup
// worker reopens the store from the name alone.
func TestStoreNameRoundTrip(t *testing.T) {
	for _, spec := range []rpc.StoreSpec{
		{URL: "file:///var/data/warehouse"},
		{URL: "file:///tmp/with@sign"},
		{URL: "file:///tmp/with%20space"},
		{URL: "s3://bucket", Endpoint: "127.0.0.1:9000"},
		{URL: "s3://bucket/deep/prefix", Endpoint: "minio.internal:443"},
		{URL: "s3://bucket/a@b;c", Endpoint: "[::1]:9000", Secure: true, Region: "eu-west-1"},
	} {
		name, err := StoreName(spec)
		if err != nil {
			t.Fatalf("%+v: %v", spec, err)
		}
		p, _ := spec.Parse()
		canon := p.Spec()
		parsed, err := rpc.ParseStoreName(name)
		got := parsed.Spec()
		if err != nil || got != canon {
			t.Errorf("%+v: named %q, parsed back as %+v, %v; want %+v", spec, name, got, err, canon)
		}
	}
	for _, bad := range []string{"s3://bucket", "relative/path", "http://x@y", ""} {
		if _, err := rpc.ParseStoreName(bad); !errors.Is(err, rpc.ErrInvalidStore) {
			t.Errorf("%q parsed: %v", bad, err)
		}
	}
}

// TestStoreNameOneSpelling: every spelling of one store gets one ledger name, so the tickets a
// host took under one spelling are seen by a sweep or a release under another; different stores
// (down to secure and region) never share a name.
func TestStoreNameOneSpelling(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spellings []rpc.StoreSpec
	}{
		{"file trailing slash and escapes", []rpc.StoreSpec{
			{URL: "file:///srv/my data"}, {URL: "file:///srv/my%20data/"}, {URL: "FILE:/srv/my%20data"}}},
		{"s3 trailing slash, escapes, endpoint case and port", []rpc.StoreSpec{
			{URL: "s3://bucket/team/a", Endpoint: "minio.internal:9000"},
			{URL: "s3://bucket/team/a/", Endpoint: "MINIO.internal:9000"},
			{URL: "s3://bucket/team%2Fa", Endpoint: "minio.internal:09000"}}},
		{"s3 default port", []rpc.StoreSpec{
			{URL: "s3://bucket", Endpoint: "s3.example.com", Secure: true},
			{URL: "s3://bucket/", Endpoint: "s3.example.com:443", Secure: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, err := StoreName(tc.spellings[0])
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.spellings[1:] {
				if n, err := StoreName(s); err != nil || n != first {
					t.Errorf("%+v is named %q (%v), %+v is named %q", s, n, err, tc.spellings[0], first)
				}
			}
		})
	}
	seen := map[string]rpc.StoreSpec{}
	for _, s := range []rpc.StoreSpec{
		{URL: "file:///srv/a"}, {URL: "file:///srv/a%2520"}, {URL: "file:///srv/a%20"},
		{URL: "s3://bucket", Endpoint: "h:9000"}, {URL: "s3://bucket/p", Endpoint: "h:9000"},
		{URL: "s3://bucket", Endpoint: "h:9001"}, {URL: "s3://bucket", Endpoint: "h:9000", Secure: true},
		{URL: "s3://bucket", Endpoint: "h:9000", Region: "r1"}, {URL: "s3://bucket", Endpoint: "h:9000", Secure: true, Region: "r1"},
		{URL: "s3://bucket/p%40h:9000", Endpoint: "x:1"}, {URL: "s3://bucket/p", Endpoint: "h:9000", Region: "secure"},
	} {
		n, err := StoreName(s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("%+v and %+v share the name %q", s, other, n)
		}
		seen[n] = s
	}
}

// TestStoreNameFitsTheLedger: every name rpc accepts is one the ledger accepts.
func TestStoreNameFitsTheLedger(t *testing.T) {
	if rpc.MaxStoreName > ledger.MaxStoreName {
		t.Fatalf("rpc accepts store names of %d bytes, the ledger only %d", rpc.MaxStoreName, ledger.MaxStoreName)
	}
}
