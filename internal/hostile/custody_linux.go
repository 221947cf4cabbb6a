package hostile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cba1309c/steward/sidecar/enginesdk"
)

// custody reserves, through the protocol's own reserve frames, names the engine must never get:
// objects that exist (the test names them; if the sidecar grants one, abandoning the failed
// invocation deletes it), names outside its dataset, and then every ticket of the ledger.
func (r *run) custody(ctx context.Context) {
	for _, kv := range strings.Split(r.p[ParamExisting], ";") {
		name, key, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		r.emit(r.reserve(ctx, "custody."+name, "reserve the existing object "+key, []string{key}, nil))
	}
	other := "hostile-elsewhere-" + r.inv
	r.emit(r.reserve(ctx, "custody.outside-dataset", "reserve a new key outside its dataset", []string{other + "/data/x.bin"}, nil))
	r.emit(r.reserve(ctx, "custody.traversal", "reserve a key that climbs out of its dataset with ..",
		[]string{r.ds + "/data/../../" + other + "/data/x.bin"}, nil))
	r.emit(r.reserve(ctx, "custody.whole-folder", "reserve the prefix of its dataset's whole data/ folder", nil, []string{r.ds + "/data/"}))
	r.emit(r.tickets(ctx))
}

func (r *run) reserve(ctx context.Context, attack, tried string, keys, prefixes []string) Finding {
	err := r.c.Reserve(ctx, keys, prefixes)
	switch {
	case err == nil:
		return Finding{Attack: attack, Tried: tried, Verdict: Succeeded, Evidence: fmt.Sprintf("granted: keys %v prefixes %v", keys, prefixes)}
	case errors.Is(err, enginesdk.ErrRefused):
		return Finding{Attack: attack, Tried: tried, Verdict: Blocked, Evidence: err.Error()}
	}
	return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: "the exchange failed: " + err.Error()}
}

// tickets reserves new keys under its own data/ folder, 1000 a frame, until it is refused or
// holds what the test calls all of them.
func (r *run) tickets(ctx context.Context) Finding {
	const attack = "custody.tickets"
	want, goal := r.intParam(ParamTickets), r.intParam(ParamTicketsGoal)
	tried := fmt.Sprintf("reserve up to %d new keys in frames of 1000, halved on each refusal (all of the ledger: %d)", want, goal)
	if want <= 0 || goal <= 0 {
		return Finding{Attack: attack, Tried: tried, Verdict: Inconclusive, Evidence: "the test named no ticket count"}
	}
	// A refused frame is retried at half the size, down to one key: a capacity check per frame
	// must not leave the last tickets untaken.
	granted, batch := 0, 1000
	var last error
	for granted < want && batch > 0 {
		n := min(batch, want-granted)
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s/data/hostile-%06d.bin", r.ds, granted+i)
		}
		if err := r.c.Reserve(ctx, keys, nil); err != nil {
			last = err
			if !errors.Is(err, enginesdk.ErrRefused) {
				break
			}
			batch /= 2
			continue
		}
		granted += n
	}
	ev := fmt.Sprintf("granted %d tickets", granted)
	if last != nil {
		ev += "; then: " + last.Error()
	}
	f := Finding{Attack: attack, Tried: tried, Verdict: verdict(granted >= goal), Evidence: ev}
	if last != nil && !errors.Is(last, enginesdk.ErrRefused) && granted < goal {
		f.Verdict = Inconclusive
	}
	return f
}
