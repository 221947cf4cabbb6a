package sidecar

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cba1309c/steward/rpc"
	"github.com/cba1309c/steward/sidecar/custody"
	"github.com/cba1309c/steward/storage"
	"github.com/cba1309c/steward/storage/lancemanifest"
	"github.com/cba1309c/steward/storage/ledger"
	"github.com/cba1309c/steward/storage/slot"
)

// Segment builds (docs/PROTOCOL.md §3.13). Custody of a build, one ledger owner through its life:
//
//	TRAIN / SEGMENT invocation   its gateway reserves every object as the invocation's (as any)
//	  answered TRAINED / SEGMENT_WRITTEN, storage confirming nothing was committed:
//	                             transfer + acknowledge → host_txn build:<id> (kept: recovery
//	                             leaves host transactions to their host)
//	  anything else              abandoned with the invocation (deleted), as any failed one
//	COMMIT_SEGMENTS at dequeue   coverage re-checked; the listed segments' objects transfer
//	                             build:<id> → the commit invocation, so its outcome settles them
//	                             like a CREATE's (accepted when committed, deleted when not,
//	                             fenced and decided when unknown, after a restart too)
//	  answered                   the rest of the build (training, segment records, superseded
//	                             segments) is abandoned; a commit refused before its engine ran
//	                             gives the segments back to the build for a retry
//
// The engine never decides coverage: the sidecar reads the pinned version's fragments from its
// manifest (storage/lancemanifest) and refuses a COMMIT_SEGMENTS whose segments overlap or miss a
// fragment, and after a commit reads the published index's segments back from storage.

// errCoverage: a COMMIT_SEGMENTS's segments do not cover the pinned version's fragments exactly
// once, or name a segment the build's custody does not hold.
var errCoverage = errors.New("segments do not cover the pinned version exactly")

// buildArea is the dataset-relative folder of build b's own objects (training, segment records).
func buildArea(b string) string { return rpc.BuildArea(b) }

// buildOwner is the ledger owner holding build b's objects between its invocations.
func buildOwner(b string) ledger.Owner {
	return ledger.Owner{Kind: ledger.HostTxn, ID: rpc.BuildOwner(b)}
}

// checkCoverage refuses segments that overlap or leave out a fragment of m.
func checkCoverage(m lancemanifest.Manifest, segs []rpc.SegmentRef) error {
	owner := make(map[uint64]string, len(m.Fragments))
	for _, id := range m.FragmentIDs() {
		owner[id] = ""
	}
	for _, s := range segs {
		for _, id := range s.FragmentIDs {
			prev, ok := owner[id]
			switch {
			case !ok:
				return fmt.Errorf("%w: segment %s names fragment %d, which version %d does not have", errCoverage, s.UUID, id, m.Version)
			case prev != "":
				return fmt.Errorf("%w: fragment %d is in segments %s and %s (overlap): drop one of them", errCoverage, id, prev, s.UUID)
			}
			owner[id] = s.UUID
		}
	}
	for _, id := range m.FragmentIDs() {
		if owner[id] == "" {
			return fmt.Errorf("%w: fragment %d of version %d is in no segment: build a segment for it", errCoverage, id, m.Version)
		}
	}
	return nil
}

// planSegments splits fragments (in id order) into contiguous runs balanced by physical rows:
// k runs, or, with k == 0, as few as keep each at or under maxRows.
func planSegments(frags []lancemanifest.Fragment, k int, maxRows int64) [][]uint64 {
	fs := slices.Clone(frags)
	slices.SortFunc(fs, func(a, b lancemanifest.Fragment) int { return cmp.Compare(a.ID, b.ID) })
	var total uint64
	for _, f := range fs {
		total += f.PhysicalRows
	}
	if k == 0 {
		k = 1
		if maxRows > 0 {
			var cur uint64
			for i, f := range fs {
				if i > 0 && cur+f.PhysicalRows > uint64(maxRows) {
					k, cur = k+1, 0
				}
				cur += f.PhysicalRows
			}
		}
	}
	k = max(1, min(k, len(fs)))
	out := make([][]uint64, 0, k)
	var cur []uint64
	var done uint64
	for i, f := range fs {
		cur = append(cur, f.ID)
		done += f.PhysicalRows
		left := len(fs) - i - 1  // fragments still to place
		need := k - len(out) - 1 // runs still to open after this one
		target := total * uint64(len(out)+1) / uint64(k)
		if need > 0 && (done >= target || left == need) {
			out, cur = append(out, cur), nil
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// readManifest reads version v of the dataset at path in store with the call's authority.
func (s *Server) readManifest(ctx context.Context, store rpc.ParsedStore, path string, creds *rpc.Credentials, v int64) (lancemanifest.Manifest, error) {
	ctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	st, err := s.openStore(ctx, store, creds)
	if err != nil {
		return lancemanifest.Manifest{}, err
	}
	m, err := lancemanifest.Read(ctx, st, path, v)
	switch {
	case errors.Is(err, lancemanifest.ErrNotFound):
		return m, fmt.Errorf("%w: %w", rpc.ErrNotFound, err)
	case errors.Is(err, lancemanifest.ErrCorrupt):
		return m, fmt.Errorf("%w: %w", rpc.ErrInvalidParams, err)
	case errors.Is(err, storage.ErrUnavailable):
		return m, fmt.Errorf("%w: read version %d's manifest: %s", rpc.ErrStorageUnavailable, v, s.sanitizeCreds(creds, err.Error()))
	case err != nil:
		return m, fmt.Errorf("%w: read version %d's manifest: %s", rpc.ErrInternal, v, s.sanitizeCreds(creds, err.Error()))
	}
	return m, nil
}

// plan answers index.plan.
func (s *Server) plan(ctx context.Context, p rpc.PlanParams) (rpc.PlanResult, error) {
	store, err := p.Dataset.Store.Parse()
	if err != nil {
		return rpc.PlanResult{}, fmt.Errorf("%w: %w", rpc.ErrInvalidParams, err)
	}
	if _, err := s.admitStore(ctx, store, p.Credentials); err != nil {
		return rpc.PlanResult{}, err
	}
	m, err := s.readManifest(ctx, store, p.Dataset.Path, p.Credentials, p.Version)
	if err != nil {
		return rpc.PlanResult{}, err
	}
	res := rpc.PlanResult{Version: p.Version, Fragments: make([]rpc.PlanFragment, len(m.Fragments)),
		Segments: planSegments(m.Fragments, p.Segments, p.MaxRowsPerSegment)}
	for i, f := range m.Fragments {
		res.Fragments[i] = rpc.PlanFragment{ID: f.ID, PhysicalRows: f.PhysicalRows}
	}
	return res, nil
}

// admitSegments checks a COMMIT_SEGMENTS at receive: its segments cover the pinned version
// exactly once (read from storage), and the build's custody here holds each of them.
func (s *Server) admitSegments(ctx context.Context, p *rpc.MutateParams, a admitted) error {
	if p.Op != rpc.OpCommitSegments || a.eng.builtin() {
		return nil
	}
	m, err := s.readManifest(ctx, a.store, p.Dataset.Path, p.Credentials, p.PinnedVersion)
	if err != nil {
		return err
	}
	if err := checkCoverage(m, p.Segment.Segments); err != nil {
		return fmt.Errorf("%w: %w", rpc.ErrInvalidParams, err)
	}
	_, err = s.segmentTickets(ctx, p)
	return err
}

// segmentTickets are the build's tickets of the listed segments' folders, each segment holding
// at least one.
func (s *Server) segmentTickets(ctx context.Context, p *rpc.MutateParams) ([]ledger.Ticket, error) {
	if s.custody == nil {
		return nil, fmt.Errorf("%w: no ledger", rpc.ErrInternal)
	}
	held, err := s.custody.Ledger().Tickets(ctx, buildOwner(p.Segment.BuildID))
	if err != nil {
		return nil, err
	}
	base := strings.Trim(p.Dataset.Path, "/") + "/_indices/"
	var out []ledger.Ticket
	for _, seg := range p.Segment.Segments {
		n := 0
		for _, t := range held {
			if strings.HasPrefix(t.Key, base+seg.UUID+"/") && t.State == ledger.Held {
				out = append(out, t)
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("%w: %w: build %s holds no object of segment %s on this sidecar (built elsewhere, "+
				"abandoned, or already committed)", rpc.ErrInvalidParams, errCoverage, p.Segment.BuildID, seg.UUID)
		}
	}
	return out, nil
}

// moveTickets moves tickets from one owner to another with the ledger's transfer and its
// contiguous receipt: offers 1..n, then the acknowledgement of n. A sidecar killed between the
// two leaves the offers with the sender (which still owns, and may still settle, them).
func (s *Server) moveTickets(ctx context.Context, from, to ledger.Owner, ts []ledger.Ticket) error {
	if len(ts) == 0 {
		return nil
	}
	l := s.custody.Ledger()
	items := make([]ledger.TransferItem, len(ts))
	for i, t := range ts {
		items[i] = ledger.TransferItem{Seq: uint64(i + 1), Store: t.Store, Key: t.Key}
	}
	if err := l.Transfer(ctx, from, to, items); err != nil {
		return err
	}
	acked, err := l.Acknowledge(ctx, from, to, uint64(len(items)))
	if err != nil {
		return err
	}
	if acked != uint64(len(items)) {
		return fmt.Errorf("transfer %v → %v: %d of %d acknowledged", from, to, acked, len(items))
	}
	return nil
}

// takeSegments moves the listed segments from the build to the COMMIT_SEGMENTS invocation right
// before its worker runs; a refusal is an answer (the job was admitted), nothing having run.
func (s *Server) takeSegments(j *job) *rpc.MutateResult {
	if j.p.Op != rpc.OpCommitSegments || j.eng.builtin() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), custody.ResolveTimeout)
	defer cancel()
	ts, err := s.segmentTickets(ctx, &j.p)
	if err == nil {
		err = s.moveTickets(ctx, buildOwner(j.p.Segment.BuildID), custody.Owner(j.p.InvocationID), ts)
	}
	if err == nil {
		// A reservation of nothing gives the tickets the invocation's record (the owner's note),
		// which a transfer does not carry: without it a sidecar killed while the commit runs
		// restarts holding them with no record to decide them by, until a host resolves the
		// invocation on this very sidecar. The campaign found that (TestSegmentCampaign's
		// sidecar_kill): its hosts resolve on whichever sidecar is live.
		err = s.custody.Reserve(ctx, invocationOf(j), nil, nil)
	}
	if err != nil {
		j.outcome = slot.NotCommitted
		return &rpc.MutateResult{Phase: rpc.PhasePreInvocationRejected, Code: rpc.ReasonInvalidRequest,
			Message: "the build's segments could not be taken into the commit's custody: " + err.Error()}
	}
	return nil
}

// settleSegments runs before the answer's custody is settled (answer): it gives a TRAIN's or
// SEGMENT's objects to its build, or ends the build of a COMMIT_SEGMENTS; it may turn an
// engine's account storage does not bear out into INDETERMINATE -23.
func (s *Server) settleSegments(j *job, res *rpc.MutateResult) {
	if s.custody == nil || !rpc.IsSegmentOp(j.p.Op) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), custody.ResolveTimeout)
	defer cancel()
	b := j.p.Segment.BuildID
	switch {
	case j.p.Op == rpc.OpCommitSegments && res.Phase == rpc.PhasePreInvocationRejected && j.outcome == slot.NotCommitted:
		s.giveBack(ctx, j)
	case j.p.Op == rpc.OpCommitSegments:
		if j.outcome == slot.Committed && res.Phase == rpc.PhaseNativeReturn {
			if why := s.verifyPublished(ctx, j); why != "" {
				s.jobLog(j).Error("the committed index is not the listed segments", "build", b, "why", why)
				res.Message = "committed, but the published index is not the listed segments: " + why
			}
		}
		s.endBuild(ctx, j)
	case res.Phase == rpc.PhaseNativeReturn && res.Code == rpc.NativeOK && j.outcome == slot.NotCommitted:
		if why := s.keepForBuild(ctx, j, res.IndexUUID); why != "" {
			s.jobLog(j).Error("the engine's account of its segment is not what custody holds: answered indeterminate", "build", b, "why", why)
			*res = rpc.MutateResult{Phase: rpc.PhaseIndeterminate, Code: rpc.ReasonUnconfirmedCommit, IndexUUID: res.IndexUUID,
				PeakMemoryBytes: res.PeakMemoryBytes, WallMs: res.WallMs,
				Message: "the engine's account is not confirmed by storage: " + why}
		}
	}
}

// keepForBuild moves a finished TRAIN's or SEGMENT's objects to its build, after checking that
// they are what it answered: a SEGMENT's under _indices/<uuid>/ (one at least) or the build's
// area, a TRAIN's under the build's area/train/<uuid>/. It returns why not, or "".
func (s *Server) keepForBuild(ctx context.Context, j *job, uuid string) string {
	inv := custody.Owner(j.p.InvocationID)
	ts, err := s.custody.Ledger().Tickets(ctx, inv)
	if err != nil {
		return "custody could not be read: " + err.Error()
	}
	base := strings.Trim(j.p.Dataset.Path, "/") + "/"
	area := base + buildArea(j.p.Segment.BuildID)
	own, found := base+"_indices/"+uuid+"/", false
	if j.p.Op == rpc.OpTrain {
		own, area = area+"train/"+uuid+"/", ""
	}
	for _, t := range ts {
		switch {
		case uuid != "" && strings.HasPrefix(t.Key, own):
			found = true
		case area != "" && strings.HasPrefix(t.Key, area):
		default:
			return fmt.Sprintf("object %s is neither the answered %s's (%s) nor the build's", t.Key, strings.ToLower(j.p.Op), uuid)
		}
	}
	if !found {
		return fmt.Sprintf("no object of the answered %s %q went through the invocation's gateway", strings.ToLower(j.p.Op), uuid)
	}
	if err := s.moveTickets(ctx, inv, buildOwner(j.p.Segment.BuildID), ts); err != nil {
		return "the objects could not be given to the build's custody: " + err.Error()
	}
	return ""
}

// giveBack returns a COMMIT_SEGMENTS's segments to its build when the commit was refused before
// its engine ran: the host may send it again.
func (s *Server) giveBack(ctx context.Context, j *job) {
	ts, err := s.custody.Ledger().Tickets(ctx, custody.Owner(j.p.InvocationID))
	if err == nil {
		err = s.moveTickets(ctx, custody.Owner(j.p.InvocationID), buildOwner(j.p.Segment.BuildID), ts)
	}
	if err != nil {
		s.jobLog(j).Error("the segments of a refused commit could not be given back to the build: they are settled with it", "error", err)
	}
}

// endBuild settles what the build still holds once its COMMIT_SEGMENTS ran: nothing of it is
// published, except a segment the committed index references, which is accepted (the
// published index is read back from storage). An undecided commit leaves the build as it is:
// the host ends it once index.resolve has spoken (objects.abandon of host_txn build:<id>).
func (s *Server) endBuild(ctx context.Context, j *job) {
	l := s.custody.Ledger()
	owner := buildOwner(j.p.Segment.BuildID)
	ts, err := l.Tickets(ctx, owner)
	if err != nil || len(ts) == 0 {
		return
	}
	var published map[string]bool
	switch j.outcome {
	case slot.Unknown:
		return
	case slot.Committed:
		m, err := s.readManifest(ctx, j.store, j.p.Dataset.Path, j.p.Credentials, j.p.PinnedVersion+1)
		if err != nil {
			s.jobLog(j).Error("the committed version could not be read back: the build's other objects stay in custody", "error", err)
			return
		}
		published = map[string]bool{}
		for _, seg := range m.Indices {
			published[seg.UUID] = true
		}
	}
	base := strings.Trim(j.p.Dataset.Path, "/") + "/_indices/"
	var accept, abandon []string
	for _, t := range ts {
		uuid, _, _ := strings.Cut(strings.TrimPrefix(t.Key, base), "/")
		if strings.HasPrefix(t.Key, base) && published[uuid] {
			accept = append(accept, t.Key)
		} else {
			abandon = append(abandon, t.Key)
		}
	}
	store := ts[0].Store
	err = errors.Join(acceptIf(ctx, l, owner, store, accept), abandonIf(ctx, l, owner, store, abandon))
	if err != nil {
		s.jobLog(j).Error("ending the build's custody failed: its objects stay held", "build", j.p.Segment.BuildID, "error", err)
	}
}

func acceptIf(ctx context.Context, l *ledger.Ledger, o ledger.Owner, store string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return l.Accept(ctx, o, store, keys)
}

func abandonIf(ctx context.Context, l *ledger.Ledger, o ledger.Owner, store string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return l.Abandon(ctx, o, store, keys)
}

// verifyPublished compares the committed index's segments, read from storage, with the listed
// ones: the same uuids, each with exactly its fragments. "" when they agree.
func (s *Server) verifyPublished(ctx context.Context, j *job) string {
	m, err := s.readManifest(ctx, j.store, j.p.Dataset.Path, j.p.Credentials, j.p.PinnedVersion+1)
	if err != nil {
		return "the committed version could not be read back: " + err.Error()
	}
	got := map[string][]uint32{}
	for _, seg := range m.Indices {
		if strings.EqualFold(seg.Name, j.p.Index.Name) {
			got[seg.UUID] = seg.Fragments
		}
	}
	if len(got) != len(j.p.Segment.Segments) {
		return fmt.Sprintf("the published index has %d segments, %d were listed", len(got), len(j.p.Segment.Segments))
	}
	for _, want := range j.p.Segment.Segments {
		have, ok := got[want.UUID]
		if !ok || !slices.EqualFunc(have, want.FragmentIDs, func(a uint32, b uint64) bool { return uint64(a) == b }) {
			return fmt.Sprintf("segment %s is published with fragments %v, listed with %v", want.UUID, have, want.FragmentIDs)
		}
	}
	return ""
}

// segmentArea is the build area a TRAIN's or SEGMENT's engine may write into ("" for others).
func segmentArea(j *job) string {
	if (j.p.Op == rpc.OpTrain || j.p.Op == rpc.OpSegment) && j.p.Segment != nil {
		return buildArea(j.p.Segment.BuildID)
	}
	return ""
}
