package testenv

import (
	"testing"
	"time"
)

// TestMachineCPU: 300 ms of this goroutine spinning shows in the machine's busy time (at least
// half of it, however busy the other cores are: busy counts them all), and idle never goes back.
func TestMachineCPU(t *testing.T) {
	busy0, idle0, err := MachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for x := 0; time.Since(start) < 300*time.Millisecond; x++ {
		sink = x
	}
	busy1, idle1, err := MachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	if got := busy1 - busy0; got < 150*time.Millisecond {
		t.Errorf("busy grew by %v over a 300 ms spin, want ≥ 150 ms", got)
	}
	if idle1 < idle0 {
		t.Errorf("idle went back from %v to %v", idle0, idle1)
	}
}

var sink int
