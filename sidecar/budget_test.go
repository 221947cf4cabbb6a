package sidecar

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cba1309c/steward/isolation"
)

// TestBudgetFIFONoStarvation: a large call waiting at the head is not passed by smaller ones
// that would fit, and is admitted as soon as enough is free; a waiter whose deadline lapses
// leaves the queue and the next one moves up.
func TestBudgetFIFONoStarvation(t *testing.T) {
	b := newMemBudget(100)
	t0 := time.Now()
	small := b.tryAcquire(40, false)
	other := b.tryAcquire(40, false)
	if small == nil || other == nil {
		t.Fatal("80 of 100 not granted at once")
	}
	type got struct {
		g   *grant
		err error
	}
	large := make(chan got, 1)
	go func() {
		g, err := b.acquire(context.Background(), 90, t0.Add(1))
		large <- got{g, err}
	}()
	waitUntil(t, func() bool { return b.state().waiting == 1 })
	if g := b.tryAcquire(10, false); g != nil {
		t.Fatal("tryAcquire passed a waiting call")
	}
	smallLater := make(chan got, 1)
	go func() {
		g, err := b.acquire(context.Background(), 10, t0.Add(2)) // 10 would fit now, but waits behind 90
		smallLater <- got{g, err}
	}()
	waitUntil(t, func() bool { return b.state().waiting == 2 })
	small.release()
	small.release() // idempotent
	if st := b.state(); st.used != 40 || st.waiting != 2 {
		t.Fatalf("after one release: %+v, want 40 used and both still waiting (90 does not fit in 60)", st)
	}
	other.release()
	l := <-large
	if l.err != nil || l.g.n != 90 {
		t.Fatalf("large: %+v", l)
	}
	s := <-smallLater
	if s.err != nil || b.state().used != 100 {
		t.Fatalf("small after large: %+v, state %+v", s, b.state())
	}
	l.g.release()
	s.g.release()

	// A waiter whose context ends leaves the queue; the one behind it is admitted.
	hold := b.tryAcquire(95, false)
	ctx, cancel := context.WithCancel(context.Background())
	lapsed := make(chan error, 1)
	go func() {
		_, err := b.acquire(ctx, 50, t0.Add(3))
		lapsed <- err
	}()
	waitUntil(t, func() bool { return b.state().waiting == 1 })
	behind := make(chan got, 1)
	go func() {
		g, err := b.acquire(context.Background(), 5, t0.Add(4))
		behind <- got{g, err}
	}()
	waitUntil(t, func() bool { return b.state().waiting == 2 })
	cancel()
	if err := <-lapsed; !errors.Is(err, context.Canceled) {
		t.Fatalf("lapsed waiter: %v", err)
	}
	if bh := <-behind; bh.err != nil || b.state().used != 100 || b.state().waiting != 0 {
		t.Fatalf("the waiter behind the lapsed one: %+v, state %+v", bh, b.state())
	}
	hold.release()
}

// TestBudgetRetiresIdleSpares: a call that needs budget held by idle spares retires them (one
// at a time, as many as it needs) rather than waiting; a claimed spare is the call's.
func TestBudgetRetiresIdleSpares(t *testing.T) {
	b := newMemBudget(100)
	var idle []*grant
	for range 3 {
		idle = append(idle, b.tryAcquire(30, true))
	}
	if st := b.state(); st.used != 90 || st.spares != 90 {
		t.Fatalf("three spares: %+v", st)
	}
	claimed := idle[0]
	claimed.claim()
	idle = idle[1:]
	b.retire = func() bool {
		if len(idle) == 0 {
			return false
		}
		g := idle[0]
		idle = idle[1:]
		g.release()
		return true
	}
	g, err := b.acquire(context.Background(), 60, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st := b.state(); st.used != 90 || st.spares != 0 || st.retired != 2 {
		t.Fatalf("after the call: %+v, want the 2 idle spares retired and 30+60 in use", st)
	}
	if _, err := b.acquire(context.Background(), 101, time.Now()); err == nil {
		t.Fatal("a request above the whole budget was not refused")
	}
	g.release()
	claimed.release()
}

// TestBudgetDefault: 80% of a cgroup limit, 50% of MemTotal, never below one worker while the
// memory holds one.
func TestBudgetDefault(t *testing.T) {
	for _, c := range []struct {
		name         string
		ceiling      isolation.MemoryCeiling
		worker, want int64
	}{
		{"cgroup", isolation.MemoryCeiling{Bytes: 10 << 30, Source: isolation.CeilingCgroup}, 1 << 30, 8 << 30},
		{"machine", isolation.MemoryCeiling{Bytes: 16 << 30, Source: isolation.CeilingMachine}, 1 << 30, 8 << 30},
		{"small machine: one worker", isolation.MemoryCeiling{Bytes: 1500 << 20, Source: isolation.CeilingMachine}, 1 << 30, 1 << 30},
		{"smaller than a worker: all of it", isolation.MemoryCeiling{Bytes: 512 << 20, Source: isolation.CeilingCgroup}, 1 << 30, 512 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, from := budgetDefault(c.ceiling, c.worker); got != c.want || from.source != c.ceiling.Source || from.base != c.ceiling.Bytes {
				t.Fatalf("budgetDefault = %d from %+v, want %d", got, from, c.want)
			}
		})
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
	}
}
