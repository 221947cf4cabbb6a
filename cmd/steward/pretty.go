package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// bar is a progress bar that redraws in place on a terminal and prints milestones elsewhere
// (CI logs stay readable).
type bar struct {
	mu        sync.Mutex
	w         io.Writer
	label     string
	unit      string // what done and total count: rows, or the engine's stage
	total     int64
	done      int64
	tty       bool
	start     time.Time
	lastDraw  time.Time
	milestone int
}

func newBar(w io.Writer, label string, total int64) *bar {
	b := &bar{w: w, label: label, unit: "rows", total: total, tty: isTerminal(w), start: time.Now()}
	b.draw(true)
	return b
}

func (b *bar) setTotal(t int64) {
	b.mu.Lock()
	if t > 0 {
		b.total = t
	}
	b.mu.Unlock()
}

// setStage names what done and total count: an engine's progress stage (train_ivf counts
// k-means iterations, shuffle rows). A new stage starts the milestones again.
func (b *bar) setStage(stage string) {
	b.mu.Lock()
	if stage != "" && stage != b.unit {
		b.unit, b.milestone = stage, 0
	}
	b.mu.Unlock()
}

func (b *bar) set(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = n
	b.draw(false)
}

// draw must be called with b.mu held (or before b is shared).
func (b *bar) draw(force bool) {
	pct := 0.0
	if b.total > 0 {
		pct = float64(b.done) / float64(b.total)
	}
	if !b.tty {
		if m := int(pct * 4); m > b.milestone && m < 4 {
			b.milestone = m
			fmt.Fprintf(b.w, "   %-34s %3.0f%%  %s/%s %s\n", b.label, pct*100, grouped(b.done), grouped(b.total), b.unit)
		}
		return
	}
	if !force && time.Since(b.lastDraw) < 50*time.Millisecond {
		return
	}
	b.lastDraw = time.Now()
	const width = 30
	filled := int(pct * width)
	fmt.Fprintf(b.w, "\r   %-34s [%s%s] %3.0f%%  %s/%s %-16s", b.label, strings.Repeat("█", filled), strings.Repeat("·", width-filled),
		pct*100, grouped(b.done), grouped(b.total), b.unit)
}

func (b *bar) finish(summary string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tty {
		fmt.Fprintf(b.w, "\r\033[K")
	}
	fmt.Fprintf(b.w, "   %-34s %s\n", b.label, summary)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// grouped renders 1234567 as "1,234,567".
func grouped(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// bytesIEC renders a byte count with a binary unit.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
