package workerproto

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cba1309c/steward/isolation"
)

// EngineReach is what an engine's own installation needs: readable, for each absolute path on
// its command line, the directory holding it, and that directory's parent when it is a bin/ (a
// virtualenv or a prefix: …/venv/bin/python reads …/venv/lib); executable, its command alone
// (resolved, with its ELF interpreter), so that the engine can start nothing else. A command
// that is a script (a console entry point: `#!/…/venv/bin/python`) runs its "#!" interpreter,
// which is reached and executable the same way; an interpreter that starts another program
// (`#!/usr/bin/env python3`, `#!/bin/sh`) cannot start it. The built-in engine (no argv) gets
// nothing here: its own trees are the system's.
func EngineReach(argv []string) isolation.Policy {
	var p isolation.Policy
	paths := argv
	if len(argv) > 0 {
		p.Exec = append([]string{}, isolation.ExecClosure(argv[0])...)
		if interp := scriptInterpreter(argv[0]); interp != "" {
			p.Exec = append(p.Exec, isolation.ExecClosure(interp)...)
			paths = append([]string{interp}, argv...)
		}
	}
	for _, a := range paths {
		if !filepath.IsAbs(a) {
			continue
		}
		d := filepath.Dir(filepath.Clean(a))
		if filepath.Base(d) == "bin" {
			d = filepath.Dir(d)
		}
		if d != "/" && !slices.Contains(p.Read, d) {
			p.Read = append(p.Read, d)
		}
	}
	return p
}

// scriptInterpreter is the absolute interpreter a script's "#!" line names, or "" for anything
// else (an ELF executable, an unreadable file, a relative interpreter).
func scriptInterpreter(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := f.Read(b)
	line, _, _ := bytes.Cut(b[:n], []byte("\n"))
	rest, ok := bytes.CutPrefix(line, []byte("#!"))
	if !ok {
		return ""
	}
	fields := strings.Fields(string(rest))
	if len(fields) == 0 || !filepath.IsAbs(fields[0]) {
		return ""
	}
	return fields[0]
}
