package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// commit is the full commit hash, stamped by the Makefile (-X main.commit); empty means "take
// vcs.revision from the build info" (go build in a git checkout records it).
var commit string

// runVersion prints what a packager asks of a binary: the build version (the one steward.hello
// reports), the module and its version, the commit it was built from, the toolchain and
// platform, and what its workers run (the embedded steward-worker, or this binary). The first
// line is "steward <version>".
func runVersion(w io.Writer) int {
	module, modVersion, rev, modified := "github.com/cba1309c/steward", "(devel)", commit, false
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Path != "" {
			module = info.Main.Path
		}
		if info.Main.Version != "" {
			modVersion = info.Main.Version
		}
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && rev == "":
				rev = s.Value
			case s.Key == "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	switch {
	case rev == "":
		rev = "unknown"
	case modified || strings.HasSuffix(version, "-dirty"):
		rev += " (modified)"
	}
	workers := "this binary (`steward worker`; built without the leanworker tag)"
	if workerExecutable != nil {
		workers = fmt.Sprintf("the embedded steward-worker (%.1f MB)", float64(len(workerExecutable))/1e6)
	}
	fmt.Fprintf(w, "steward %s\nmodule  %s %s\ncommit  %s\nbuilt   %s %s/%s\nworkers %s\n",
		buildVersion(), module, modVersion, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH, workers)
	return 0
}
