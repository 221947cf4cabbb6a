package dispatch

import (
	"context"
	"time"

	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// RefreshFunc is the host's post-commit hook (e.g. reload the table's index catalog). It runs
// after a job commits, or when an answer shows the dataset advanced past the admitted version. It
// must be idempotent: a failed or interrupted refresh runs again. It runs inside a round, bounded
// by Config.RefreshTimeout, so a slow hook delays that round.
type RefreshFunc func(ctx context.Context, j Job) error

// CredentialsFunc supplies per-call storage credentials for a job's dataset at send time (never
// stored in the job). Nil sends none.
type CredentialsFunc func(ctx context.Context, d rpc.DatasetRef) (*rpc.Credentials, error)

// Config configures a Dispatcher. Zero values take the documented defaults.
type Config struct {
	// Store is the durable job store. Required; the dispatcher does not close it.
	Store Store
	// Interval is how often Run starts a round. Default 1s.
	Interval time.Duration
	// ExecuteDeadline is how long after dispatch a job's deadline falls. It must fund the
	// sidecar's kill budget (clock skew + term grace + reap bound, 22s by default) plus a runnable
	// window, or the sidecar refuses the call at receive. Default 10m.
	ExecuteDeadline time.Duration
	// AnswerGrace is how long past the deadline a call may stay unanswered before the job is
	// journaled overdue (the job is UNKNOWN by then). The dispatcher keeps waiting after that:
	// only the answer (or the sidecar's exit) frees the slot and the call's in-flight place, and a
	// late answer still settles the job. Default 30s.
	AnswerGrace time.Duration
	// MaxPerRound caps the sends a round starts, and separately the resolves it tries. Default 8.
	MaxPerRound int
	// MaxInFlightPerSidecar caps the calls outstanding to one sidecar; keep it at the sidecar's
	// executor pool size. Default 2.
	MaxInFlightPerSidecar int
	// RefreshRetryInterval is the least time between two attempts of a FAILED refresh. A first
	// REQUIRED refresh is never delayed. Default 30s.
	RefreshRetryInterval time.Duration
	// RefreshTimeout bounds one run of the refresh hook. Default 1m.
	RefreshTimeout time.Duration
	// ResolveRetryInterval is the least time between two index.resolve attempts for one UNKNOWN
	// job (kept in memory only: a failed attempt writes nothing). Default 5s.
	ResolveRetryInterval time.Duration
	// ResolveTimeout bounds one index.resolve call. Default 30s.
	ResolveTimeout time.Duration
	// MaxUnresolvedPerDataset is the quota of unresolved jobs per dataset. Default 64.
	MaxUnresolvedPerDataset int
	// MaxUnresolved is the quota of unresolved jobs in the whole store. Default 1024.
	MaxUnresolved int
	// PruneAge is how long a finished job is kept after its last update. A finished job is one no
	// round acts on any more: COMMITTED or NOT_COMMITTED with its slot free and its refresh done
	// (or not required), or UNKNOWN and force-released. UNKNOWN jobs not released and live jobs are
	// never pruned. Default 7 days (168h).
	PruneAge time.Duration
	// PruneKeep is the most finished jobs kept: beyond it the least recently updated ones are
	// deleted whatever their age. Default 10,000 (a job takes about 5.5 KiB of store).
	PruneKeep int
	// PruneInterval is the least time between two prune passes; a pass reads every stored job,
	// since finished ones are not indexed. The first round prunes. Default 1h.
	PruneInterval time.Duration
	// SidecarGoneAfter is how long a plan sidecar of a segmented job must go unannounced by every
	// node (a shared journal only) before the job moves its work off it (gone.go): long enough for
	// a host that died to come back under its name with its ledger, which is cheaper than taking
	// its custody over from storage. Default 1m.
	SidecarGoneAfter time.Duration
	// Disabled starts the dispatcher with admission switched off (see SetEnabled). Default false.
	Disabled bool
	// Refresh is the post-commit hook. Nil: no refresh is ever required.
	Refresh RefreshFunc
	// Credentials supplies per-call storage credentials. Nil: none.
	Credentials CredentialsFunc
	// Progress receives a segmented job's progress each time this dispatcher journals a change
	// of it (SegmentedPlan.Done): the job's own $/progress, where the wire's reports one
	// invocation's (PROTOCOL.md §5). It is called outside any store transaction, after the
	// change is durable, and must not block. Nil: none.
	Progress func(JobProgress)
	// Logger receives the dispatcher's log lines. Default: hclog at info, named "dispatch".
	Logger hclog.Logger
	// Now is the clock of deadlines and history. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt := func(i *int, v int) {
		if *i <= 0 {
			*i = v
		}
	}
	def(&c.Interval, time.Second)
	def(&c.ExecuteDeadline, 10*time.Minute)
	def(&c.AnswerGrace, 30*time.Second)
	def(&c.RefreshRetryInterval, 30*time.Second)
	def(&c.RefreshTimeout, time.Minute)
	def(&c.ResolveRetryInterval, 5*time.Second)
	def(&c.ResolveTimeout, 30*time.Second)
	defInt(&c.MaxPerRound, 8)
	defInt(&c.MaxInFlightPerSidecar, 2)
	defInt(&c.MaxUnresolvedPerDataset, 64)
	defInt(&c.MaxUnresolved, 1024)
	def(&c.SidecarGoneAfter, time.Minute)
	def(&c.PruneAge, 7*24*time.Hour)
	def(&c.PruneInterval, time.Hour)
	defInt(&c.PruneKeep, 10000)
	if c.Logger == nil {
		c.Logger = hclog.New(&hclog.LoggerOptions{Name: "dispatch", Level: hclog.Info})
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
