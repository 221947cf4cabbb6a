// Package storecfg owns the one mapping from a wire store spec (rpc.StoreSpec, read by
// rpc.StoreSpec.Parse) to a storage.StoreConfig. The worker, the sidecar, the CLI, the demo and
// the campaign all open stores through it, so a URL means the same store to every one of them.
// It imports rpc and storage only (internal/archtest holds it to that), and lives outside sidecar
// so that host-side code such as the campaign, which must not depend on the supervisor, can link
// it too.
package storecfg

import (
	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/storage"
)

// Config maps a parsed store and optional credentials to a storage config. Credentials apply to
// s3 stores only; a file store ignores them. Retry and timeout settings keep storage's defaults.
func Config(p rpc.ParsedStore, creds *rpc.Credentials) storage.StoreConfig {
	if p.Kind == rpc.StoreFile {
		return storage.StoreConfig{Kind: storage.KindLocal, Root: p.Root}
	}
	cfg := storage.StoreConfig{Kind: storage.KindS3, Endpoint: p.Endpoint, Bucket: p.Bucket, Prefix: p.Prefix,
		Secure: p.Secure, Region: p.Region}
	if creds != nil {
		cfg.AccessKey, cfg.SecretKey = creds.AccessKey, creds.SecretKey
	}
	return cfg
}

// FromSpec parses spec and maps it with Config. Errors wrap rpc.ErrInvalidStore.
func FromSpec(spec rpc.StoreSpec, creds *rpc.Credentials) (storage.StoreConfig, error) {
	p, err := spec.Parse()
	if err != nil {
		return storage.StoreConfig{}, err
	}
	return Config(p, creds), nil
}
