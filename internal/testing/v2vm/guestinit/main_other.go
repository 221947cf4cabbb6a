//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "guestinit: unsupported: it is the init of a Linux VM")
	os.Exit(2)
}
