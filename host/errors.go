package host

import "errors"

// Sentinels of the host side. Errors of the sidecar itself are the rpc sentinels.
var (
	// ErrLaunch means the sidecar could not be started or did not complete its handshake.
	ErrLaunch = errors.New("host: launch sidecar")
	// ErrConfig means the Config is unusable.
	ErrConfig = errors.New("host: invalid config")
	// ErrIdentity means an answer did not echo the identity it must (invocation id, epoch).
	ErrIdentity = errors.New("host: identity mismatch")
)
