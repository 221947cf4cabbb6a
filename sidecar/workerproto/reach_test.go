package workerproto

import (
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
