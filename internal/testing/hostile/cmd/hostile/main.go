// Command hostile is the hostile test engine of engine protocol v1 (package
// internal/testing/hostile): register it with `steward serve --engine hostile=/path/to/hostile` and send
// it an index.mutate of type HOSTILE; it attacks its containment and reports each attack on
// stderr.
package main

import (
	"os"

	"github.com/cba1309c/steward/internal/testing/hostile"
)

func main() { os.Exit(hostile.Main(os.Args[1:])) }
