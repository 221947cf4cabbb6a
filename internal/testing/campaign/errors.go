package campaign

import "errors"

var (
	// ErrConfig means a Config is unusable (a required path is missing, a bound is negative).
	ErrConfig = errors.New("campaign: invalid config")
	// ErrSetup means the campaign could not build its environment (MinIO, datasets, sidecars).
	ErrSetup = errors.New("campaign: setup failed")
	// ErrIsolation means a sidecar of the campaign started without verified isolation (it would
	// refuse every mutation); it comes wrapped with ErrSetup.
	ErrIsolation = errors.New("campaign: sidecar isolation did not verify")
	// ErrUnsupported means the platform cannot run a campaign (it needs Linux cgroups and /proc).
	ErrUnsupported = errors.New("campaign: unsupported platform")
)
