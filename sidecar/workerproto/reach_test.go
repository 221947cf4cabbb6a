package workerproto

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestEngineReach(t *testing.T) {
	p := EngineReach([]string{"/opt/lance/venv/bin/python", "-B", "/opt/lance/engine.py", "relative/arg"})
	if want := []string{"/opt/lance/venv", "/opt/lance"}; !slices.Equal(p.Read, want) {
		t.Fatalf("Read = %v, want %v", p.Read, want)
	}
	if p.Exec == nil {
		t.Fatal("an engine's Exec is nil: the system's trees would stay executable")
	}
	if b := EngineReach(nil); b.Exec != nil || b.Read != nil {
		t.Fatalf("the built-in engine: %+v", b)
	}
}

// TestEngineReachScript: a console entry point's "#!" interpreter is reached and executable as
// the command itself would be; a script without an absolute interpreter adds nothing.
func TestEngineReachScript(t *testing.T) {
	venv := t.TempDir()
	bin := filepath.Join(venv, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	python, err := os.Executable() // any ELF program stands in for the venv's interpreter
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(python, filepath.Join(bin, "python")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(bin, "engine")
	if err := os.WriteFile(script, []byte("#!"+filepath.Join(bin, "python")+" -s\nimport sys\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := EngineReach([]string{script})
	if want := []string{venv}; !slices.Equal(p.Read, want) {
		t.Errorf("Read = %v, want %v", p.Read, want)
	}
	real, _ := filepath.EvalSymlinks(python)
	if !slices.Contains(p.Exec, real) || !slices.Contains(p.Exec, script) {
		t.Errorf("Exec = %v: want the script %s and its interpreter %s", p.Exec, script, real)
	}
	relative := filepath.Join(bin, "relative")
	if err := os.WriteFile(relative, []byte("#!python\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if p := EngineReach([]string{relative}); len(p.Exec) != 1 {
		t.Errorf("a relative interpreter: Exec = %v, want the script alone", p.Exec)
	}
}
