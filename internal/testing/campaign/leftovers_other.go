//go:build !linux

package campaign

import "fmt"

func leftovers(string, string) ([]string, []string, error) {
	return nil, nil, fmt.Errorf("%w: leftover checks need /proc and cgroups", ErrUnsupported)
}
