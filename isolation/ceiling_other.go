//go:build !linux

package isolation

// OwnMemoryCeiling fails with ErrUnsupported off Linux.
func OwnMemoryCeiling() (MemoryCeiling, error) { return MemoryCeiling{}, errUnsupported }
