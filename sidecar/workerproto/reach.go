package workerproto

import (
	"path/filepath"

	"github.com/cba1309c/steward/isolation"
)

// EngineReach is what an engine's own installation needs: readable, for each absolute path on
// its command line, the directory holding it, and that directory's parent when it is a bin/ (a
// virtualenv or a prefix: …/venv/bin/python reads …/venv/lib); executable, its command alone
// (resolved, with its ELF interpreter), so that the engine can start nothing else. The built-in
// engine (no argv) gets nothing here: its own trees are the system's.
func EngineReach(argv []string) isolation.Policy {
	var p isolation.Policy
	if len(argv) > 0 {
		p.Exec = append([]string{}, isolation.ExecClosure(argv[0])...)
	}
	for _, a := range argv {
		if !filepath.IsAbs(a) {
			continue
		}
		d := filepath.Dir(filepath.Clean(a))
		if filepath.Base(d) == "bin" {
			d = filepath.Dir(d)
		}
		if d != "/" {
			p.Read = append(p.Read, d)
		}
	}
	return p
}
