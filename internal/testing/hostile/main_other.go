//go:build !linux

package hostile

import (
	"fmt"
	"os"
)

// Main is the hostile engine's entry; its attacks are Linux syscalls, so elsewhere it refuses.
func Main([]string) int {
	fmt.Fprintln(os.Stderr, "hostile: Linux only")
	return 2
}
