package hostile

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cba1309c/steward/sidecar/enginesdk"
)

// custody sends reserve frames for objects that exist (the test names them). The sidecar answers
// every reserve frame "reserved" without effect — custody is taken by the gateway as objects are
// written — so the attack is whether that answer took custody all the same: had it, abandoning
// the failed invocation would delete those objects. The test looks after custody settled.
func (r *run) custody(ctx context.Context) {
	for _, kv := range strings.Split(r.p[ParamExisting], ";") {
		name, key, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		f := Finding{Attack: "custody.reserve-" + name, Tried: "reserve frame for the existing object " + key + " (abandoning the invocation deletes what it holds)",
			Left: []string{"key:" + key}}
		err := r.c.Reserve(ctx, []string{key}, nil)
		switch {
		case err == nil:
			f.Verdict, f.Evidence = Pending, "answered reserved; the test looks for the object after custody settled"
		case errors.Is(err, enginesdk.ErrRefused):
			f.Verdict, f.Evidence = Blocked, err.Error()
		default:
			f.Verdict, f.Evidence = Inconclusive, fmt.Sprintf("the exchange failed: %v", err)
		}
		r.emit(f)
	}
	f := Finding{Attack: "custody.reserve-prefix", Tried: "reserve frame for the prefix of its dataset's whole data/ folder and another dataset's",
		Left: []string{"key:" + r.existing("own-data"), "key:" + r.existing("foreign-data")}}
	if err := r.c.Reserve(ctx, nil, []string{r.ds + "/data/", r.existingDataset() + "/data/"}); err != nil {
		f.Verdict, f.Evidence = Blocked, err.Error()
	} else {
		f.Verdict, f.Evidence = Pending, "answered reserved; the test looks for the objects after custody settled"
	}
	r.emit(f)
}
