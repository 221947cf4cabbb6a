package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBarNamesTheStage: outside a terminal the bar prints its quarter milestones, counting what
// the engine's stage counts (k-means iterations are not rows), and a new stage starts its
// milestones again.
func TestBarNamesTheStage(t *testing.T) {
	var out bytes.Buffer
	b := newBar(&out, "IVF_PQ by_vec(vec)", 0)
	b.setStage("train_ivf")
	b.setTotal(50)
	b.set(15)
	b.set(30)
	b.setStage("shuffle")
	b.setTotal(8000)
	b.set(2500)
	want := []string{
		"30%  15/50 train_ivf",
		"60%  30/50 train_ivf",
		"31%  2,500/8,000 shuffle",
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want) {
		t.Fatalf("printed %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d = %q, want it to end in %q", i, lines[i], w)
		}
	}
	rows := newBar(&out, "rows written", 100)
	out.Reset()
	rows.set(50)
	if got := strings.TrimSpace(out.String()); !strings.HasSuffix(got, "50/100 rows") {
		t.Errorf("without a stage the bar counts rows: %q", got)
	}
}
