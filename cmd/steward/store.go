package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cba1309c/steward/rpc"
)

// storeSpec turns a --store (or --s3) argument into the wire store spec that names it, read by
// rpc's one parser: a store URL (s3://bucket[/prefix] with its endpoint from STEWARD_S3_ENDPOINT
// and https from STEWARD_S3_SECURE, or file:///dir), else a local directory, a relative one taken
// from the working directory. Errors wrap errUsage and rpc.ErrInvalidStore.
func storeSpec(arg string) (rpc.StoreSpec, error) {
	spec := rpc.StoreSpec{URL: arg}
	if !strings.Contains(arg, "://") {
		dir, err := filepath.Abs(arg)
		if err != nil {
			return rpc.StoreSpec{}, fmt.Errorf("%w: store directory: %w", errUsage, err)
		}
		spec.URL = rpc.FileStoreURL(dir)
	} else if p, err := rpc.ParseStoreURL(arg); err != nil {
		return rpc.StoreSpec{}, fmt.Errorf("%w: %w", errUsage, err)
	} else if p.Kind == rpc.StoreS3 {
		if spec.Endpoint = os.Getenv(envS3Endpoint); spec.Endpoint == "" {
			return rpc.StoreSpec{}, fmt.Errorf("%w: %s is not set", errUsage, envS3Endpoint)
		}
		switch strings.ToLower(os.Getenv(envS3Secure)) {
		case "1", "true", "yes":
			spec.Secure = true
		}
	}
	if err := spec.Validate(); err != nil {
		return rpc.StoreSpec{}, fmt.Errorf("%w: %w", errUsage, err)
	}
	return spec, nil
}

// envCredentials are the S3 credentials of the environment, nil when no access key is set.
func envCredentials() *rpc.Credentials {
	ak := os.Getenv(envS3AccessKey)
	if ak == "" {
		return nil
	}
	return &rpc.Credentials{AccessKey: ak, SecretKey: os.Getenv(envS3SecretKey)}
}
