// Package lanceengine carries the Lance engine's Python package (this directory: its modules,
// pyproject.toml with its in-tree build backend, and the hash lock of its dependencies) inside
// the steward binary, so that `steward lance install` needs nothing but the binary, python3 and
// an index of the locked wheels. It runs nothing itself.
package lanceengine

import "embed"

// Files are the sources pip builds the package from (pyproject.toml, wheelbuild.py, the modules)
// and requirements.lock, at the top of the FS.
//
//go:embed pyproject.toml wheelbuild.py engine.py segments.py steward_engine.py lancectl.py requirements.lock
var Files embed.FS

// Lock is the name of the hash lock in Files.
const Lock = "requirements.lock"
