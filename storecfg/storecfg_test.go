package storecfg_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storecfg"
)

// TestFromSpec: the mapping opens what the URL names, decoded once, and nothing else: no
// userinfo bucket, no query in the prefix, no credentials on a file store.
func TestFromSpec(t *testing.T) {
	creds := &rpc.Credentials{AccessKey: "ak", SecretKey: "sk"}
	for _, tc := range []struct {
		name string
		spec rpc.StoreSpec
		want storage.StoreConfig
	}{
		{"file decoded once", rpc.StoreSpec{URL: "file:///srv/my%20data/"},
			storage.StoreConfig{Kind: storage.KindLocal, Root: "/srv/my data"}},
		{"s3 prefix without slashes", rpc.StoreSpec{URL: "s3://bucket/team/a%20b/", Endpoint: "Minio:9000", Secure: true, Region: "r1"},
			storage.StoreConfig{Kind: storage.KindS3, Endpoint: "minio:9000", Bucket: "bucket", Prefix: "team/a b",
				Secure: true, Region: "r1", AccessKey: "ak", SecretKey: "sk"}},
		{"s3 whole bucket", rpc.StoreSpec{URL: "s3://bucket", Endpoint: "127.0.0.1:9000"},
			storage.StoreConfig{Kind: storage.KindS3, Endpoint: "127.0.0.1:9000", Bucket: "bucket", AccessKey: "ak", SecretKey: "sk"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := storecfg.FromSpec(tc.spec, creds)
			if err != nil || got != tc.want {
				t.Fatalf("FromSpec(%+v) = %v, %v; want %v", tc.spec, got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{"s3://u@bucket/x", "s3://bucket/x?y", "file:///x#y", "file://rel/x"} {
		if _, err := storecfg.FromSpec(rpc.StoreSpec{URL: bad, Endpoint: "h:1"}, creds); !errors.Is(err, rpc.ErrInvalidStore) {
			t.Errorf("FromSpec(%q) = %v, want ErrInvalidStore", bad, err)
		}
	}
}

func ExampleFromSpec() {
	cfg, err := storecfg.FromSpec(rpc.StoreSpec{URL: "s3://warehouse/team%20a/", Endpoint: "minio:9000"}, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(cfg.Kind, cfg.Bucket, cfg.Prefix)
	// Output: s3 warehouse team a
}
