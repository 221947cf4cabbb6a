package main

import (
	"fmt"
	"os"

	"github.com/cba1309c/steward/isolation"
)

// guestStore makes the demo's local store a folder the sidecar's contained workers can write:
// they run as an unprivileged guest (isolation.DefaultGuestID when the sidecar is root, else the
// sidecar's own uid), so as root the folder is made the guest's, and the local store gives what
// it creates below it the same owner. The guest must also be able to search every directory
// above it (the demo's temporary working directory is made so).
func guestStore(store string) error {
	if err := os.MkdirAll(store, 0o755); err != nil {
		return fmt.Errorf("demo store: %w", err)
	}
	if os.Geteuid() != 0 {
		return nil
	}
	if err := os.Chown(store, isolation.DefaultGuestID, isolation.DefaultGuestID); err != nil {
		return fmt.Errorf("demo store: hand it to the workers' guest: %w", err)
	}
	return nil
}
