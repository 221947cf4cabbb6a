package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// The etcd journal's key layout, under EtcdOptions.Prefix (default "/steward/dispatch"):
//
//	<prefix>/v1/active/<job id>  a job a round still acts on (Job.Active)  {"format":1,"job":{…}}
//	<prefix>/v1/done/<job id>    a job no round acts on any more            {"format":1,"job":{…}}
//	<prefix>/v1/nodes/<node>     a node's claim, under the node's lease     {"format":1,"node":…,"started":…}
//	<prefix>/v1/epochs/<epoch>   a sidecar epoch a live node drives, under that node's lease
//	                             {"format":1,"node":…,"sidecar":…}
//
// A job's record lives under exactly one of active/ and done/, so a round reads the active jobs
// with one range read, and a transition that changes a job's activity moves the record in the
// same transaction. Values carry a format version; a reader refuses a version it does not know
// (ErrFormat) instead of guessing. "v1" in the keys is the layout version.
const (
	DefaultEtcdPrefix = "/steward/dispatch"
	etcdFormat        = 1
	etcdLayout        = "/v1"
)

// EtcdOptions configure OpenEtcd.
type EtcdOptions struct {
	// Endpoints are the etcd client URLs. Required unless Client is set.
	Endpoints []string
	// Client, if set, is used instead of dialing Endpoints; Close leaves it open.
	Client *clientv3.Client
	// Prefix is the journal's key prefix; several journals may share a cluster under different
	// prefixes. Default DefaultEtcdPrefix.
	Prefix string
	// Node names this host process in the cluster. OpenEtcd takes the node's claim (a key under
	// a lease of LeaseTTL) and keeps it alive; a dispatcher journals a send only in the
	// transaction that proves the claim still holds. Empty opens the store without a claim: it
	// reads, admits and force-releases (the CLI), and refuses to journal a send (ErrClaimLost).
	Node string
	// LeaseTTL is the lease of the node's claim and of its sidecar epochs: how long after this
	// process stops renewing it (death, partition, SIGSTOP) other nodes see its epochs gone.
	// Default 10s.
	LeaseTTL time.Duration
	// ClaimWait is how long OpenEtcd waits for a claim of the same node name held by a previous
	// process (which may have crashed: its lease runs out within LeaseTTL). Default 2×LeaseTTL.
	ClaimWait time.Duration
	// OpTimeout bounds each etcd request. Default 10s.
	OpTimeout time.Duration
	// DialTimeout bounds connecting to Endpoints. Default 5s.
	DialTimeout time.Duration
}

// EtcdStore is the shared Store: one journal in etcd for every host process of a cluster. Every
// Update is one etcd transaction, committed only if nothing it read changed since (each key read
// is compared by mod revision, each range read by the revision of the read), and retried from
// scratch on a conflict, as etcd's concurrency.STM does. A Put that journals a send (a RUNNING
// record with an invocation id the stored record did not have) also compares this node's claim
// key, so a node that lost its claim can never send.
type EtcdStore struct {
	cli     *clientv3.Client
	ownCli  bool
	prefix  string
	node    string
	opts    EtcdOptions
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	commits atomic.Int64 // write transactions committed
	cache   *decodeCache // the jobs decoded from their records, by key (Get, Active)

	mu      sync.Mutex
	closing bool
	sess    *concurrency.Session
	lease   clientv3.LeaseID
	epochs  map[string]string // announced epoch → sidecar name, re-announced under a new lease
}

var (
	_ Store   = (*EtcdStore)(nil)
	_ Cluster = (*EtcdStore)(nil)
)

// OpenEtcd connects to the journal and, with a Node, takes the node's claim.
func OpenEtcd(ctx context.Context, o EtcdOptions) (*EtcdStore, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultEtcdPrefix
	}
	o.Prefix = strings.TrimRight(o.Prefix, "/")
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.ClaimWait <= 0 {
		o.ClaimWait = 2 * o.LeaseTTL
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 5 * time.Second
	}
	if strings.Contains(o.Node, "/") {
		return nil, fmt.Errorf("%w: node name %q contains /", ErrInvalidConfig, o.Node)
	}
	s := &EtcdStore{cli: o.Client, prefix: o.Prefix + etcdLayout, node: o.Node, opts: o, epochs: map[string]string{},
		cache: newDecodeCache()}
	if s.cli == nil {
		if len(o.Endpoints) == 0 {
			return nil, fmt.Errorf("%w: EtcdOptions.Endpoints is required", ErrInvalidConfig)
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: o.Endpoints, DialTimeout: o.DialTimeout, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("dispatch: connect to etcd %v: %w", o.Endpoints, err)
		}
		s.cli, s.ownCli = cli, true
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if o.Node != "" {
		if err := s.claim(ctx); err != nil {
			s.Close()
			return nil, err
		}
		s.wg.Add(1)
		go s.keepClaim()
	}
	return s, nil
}

func (s *EtcdStore) activeKey(id string) string { return s.prefix + "/active/" + id }
func (s *EtcdStore) doneKey(id string) string   { return s.prefix + "/done/" + id }
func (s *EtcdStore) nodeKey() string            { return s.prefix + "/nodes/" + s.node }
func (s *EtcdStore) epochKey(e string) string   { return s.prefix + "/epochs/" + e }

// Prefix is the journal's key prefix with its layout version (<prefix>/v1).
func (s *EtcdStore) Prefix() string { return s.prefix }

// Client is the store's etcd client.
func (s *EtcdStore) Client() *clientv3.Client { return s.cli }

type nodeValue struct {
	Format  int       `json:"format"`
	Node    string    `json:"node"`
	Started time.Time `json:"started"`
}

type epochValue struct {
	Format  int    `json:"format"`
	Node    string `json:"node"`
	Sidecar string `json:"sidecar"`
}

// claim takes the node key under a new lease: put-if-absent, waiting up to ClaimWait for a
// previous holder's lease to run out. Two live processes never hold one node name.
func (s *EtcdStore) claim(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ClaimWait)
	defer cancel()
	sess, err := concurrency.NewSession(s.cli, concurrency.WithTTL(ttlSeconds(s.opts.LeaseTTL)), concurrency.WithContext(s.ctx))
	if err != nil {
		return fmt.Errorf("dispatch: etcd lease: %w", err)
	}
	v, _ := json.Marshal(nodeValue{Format: etcdFormat, Node: s.node, Started: time.Now().UTC()})
	for {
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(s.nodeKey()), "=", 0)).
			Then(clientv3.OpPut(s.nodeKey(), string(v), clientv3.WithLease(sess.Lease()))).Commit()
		if err == nil && resp.Succeeded {
			break
		}
		if err == nil {
			err = fmt.Errorf("%w: %s", ErrNodeClaimed, s.node)
		}
		select {
		case <-ctx.Done():
			sess.Close()
			return fmt.Errorf("dispatch: claim node %s: %w", s.node, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		sess.Close()
		return ErrClosed
	}
	s.sess, s.lease = sess, sess.Lease()
	epochs := maps2slice(s.epochs)
	s.mu.Unlock()
	for _, e := range epochs {
		if err := s.putEpoch(ctx, e[0], e[1]); err != nil {
			return err
		}
	}
	return nil
}

// keepClaim takes a new claim whenever the lease is lost (expired during a partition or a
// SIGSTOP). Sends journaled under the old claim stay as they are: other nodes settle them.
func (s *EtcdStore) keepClaim() {
	defer s.wg.Done()
	for {
		s.mu.Lock()
		sess, closing := s.sess, s.closing
		s.mu.Unlock()
		if closing || sess == nil {
			return
		}
		select {
		case <-s.ctx.Done():
			return
		case <-sess.Done():
		}
		for s.ctx.Err() == nil && !s.isClosing() {
			if err := s.claim(s.ctx); err == nil {
				break
			}
		}
	}
}

func (s *EtcdStore) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func ttlSeconds(d time.Duration) int { return max(1, int((d+time.Second-1)/time.Second)) }

// Node implements Cluster.
func (s *EtcdStore) Node() (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node, int64(s.lease)
}

// AnnounceEpoch implements Cluster: the epoch key lives under the node's lease.
func (s *EtcdStore) AnnounceEpoch(sidecar, epoch string) error {
	if s.node == "" {
		return fmt.Errorf("%w: a store opened without a node announces no sidecar", ErrInvalidConfig)
	}
	s.mu.Lock()
	s.epochs[epoch] = sidecar
	s.mu.Unlock()
	ctx, cancel := s.opCtx()
	defer cancel()
	return s.putEpoch(ctx, sidecar, epoch)
}

func (s *EtcdStore) putEpoch(ctx context.Context, sidecar, epoch string) error {
	s.mu.Lock()
	lease := s.lease
	s.mu.Unlock()
	v, _ := json.Marshal(epochValue{Format: etcdFormat, Node: s.node, Sidecar: sidecar})
	if _, err := s.cli.Put(ctx, s.epochKey(epoch), string(v), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("dispatch: announce epoch %s: %w", epoch, err)
	}
	return nil
}

// EpochLive implements Cluster.
func (s *EtcdStore) EpochLive(epoch string) (bool, error) {
	ctx, cancel := s.opCtx()
	defer cancel()
	resp, err := s.cli.Get(ctx, s.epochKey(epoch), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("dispatch: etcd: %w", err)
	}
	return resp.Count > 0, nil
}

// SidecarLive implements Cluster: one range over the announced epochs, each under the lease of
// the node that announced it.
func (s *EtcdStore) SidecarLive(name string) (bool, error) {
	ctx, cancel := s.opCtx()
	defer cancel()
	resp, err := s.cli.Get(ctx, s.epochKey(""), clientv3.WithPrefix())
	if err != nil {
		return false, fmt.Errorf("dispatch: etcd: %w", err)
	}
	for _, kv := range resp.Kvs {
		var v epochValue
		if json.Unmarshal(kv.Value, &v) == nil && v.Sidecar == name {
			return true, nil
		}
	}
	return false, nil
}

// Commits is the number of write transactions this store committed (a measure for benchmarks).
func (s *EtcdStore) Commits() int64 { return s.commits.Load() }

// Close gives up the node's claim (its epochs go with its lease) and closes the client it dialed.
func (s *EtcdStore) Close() error {
	s.mu.Lock()
	sess := s.sess
	s.sess, s.closing = nil, true
	s.mu.Unlock()
	if sess != nil {
		sess.Close() // revokes the lease (before the store's context ends): claim and epochs go at once
	}
	s.cancel()
	s.wg.Wait()
	if s.ownCli {
		return s.cli.Close()
	}
	return nil
}

func (s *EtcdStore) opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.ctx, s.opts.OpTimeout)
}

func (s *EtcdStore) closed() error {
	if s.ctx.Err() != nil {
		return ErrClosed
	}
	return nil
}

// View implements Store: every read sees the journal at one revision.
func (s *EtcdStore) View(fn func(Tx) error) error {
	if err := s.closed(); err != nil {
		return err
	}
	return fn(s.newTx(false))
}

// maxAttempts bounds the retries of an Update that keeps conflicting.
const maxAttempts = 64

// Update implements Store: fn runs on a snapshot and its writes commit in one transaction that
// compares everything it read; on a conflict it runs again on a fresh snapshot.
func (s *EtcdStore) Update(fn func(Tx) error) error {
	for attempt := 0; ; attempt++ {
		if err := s.closed(); err != nil {
			return err
		}
		tx := s.newTx(true)
		if err := fn(tx); err != nil {
			return err
		}
		ok, err := tx.commit()
		if err != nil || ok {
			return err
		}
		if attempt+1 >= maxAttempts {
			return fmt.Errorf("%w after %d attempts", ErrConflict, maxAttempts)
		}
		time.Sleep(time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 5))))
	}
}

// Watch implements Store with etcd watches on the job's two keys.
func (s *EtcdStore) Watch(ctx context.Context, id string) (<-chan struct{}, error) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan struct{}, 1)
	var chans []clientv3.WatchChan
	for _, k := range []string{s.activeKey(id), s.doneKey(id)} {
		wc := s.cli.Watch(clientv3.WithRequireLeader(ctx), k, clientv3.WithCreatedNotify())
		select {
		case r, ok := <-wc: // the watch exists on the server: no later change is missed
			if !ok || r.Err() != nil {
				cancel()
				return nil, fmt.Errorf("dispatch: watch %s: %w", id, errors.Join(r.Err(), ctx.Err()))
			}
		case <-ctx.Done():
			cancel()
			return nil, ctx.Err()
		}
		chans = append(chans, wc)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer close(out)
		a, b := chans[0], chans[1]
		for a != nil || b != nil {
			var ok bool
			select {
			case _, ok = <-a:
				if !ok {
					a = nil
				}
			case _, ok = <-b:
				if !ok {
					b = nil
				}
			case <-s.ctx.Done():
				return
			}
			if ok {
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, nil
}

// etcdRecord is a job's stored value.
type etcdRecord struct {
	Format int  `json:"format"`
	Job    *Job `json:"job"`
}

func decodeJob(key string, v []byte) (Job, error) {
	var r etcdRecord
	if err := json.Unmarshal(v, &r); err != nil {
		return Job{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, key, err)
	}
	if r.Format != etcdFormat || r.Job == nil {
		return Job{}, fmt.Errorf("%w: %s has format %d (this build reads %d)", ErrFormat, key, r.Format, etcdFormat)
	}
	return *r.Job, nil
}

// etcdTx is one optimistic transaction: reads at one revision, writes buffered until commit.
type etcdTx struct {
	s      *EtcdStore
	write  bool
	rev    int64            // the snapshot revision (0 until the first read)
	reads  map[string]int64 // key → mod revision seen (0: absent)
	ranges []string         // prefixes read in full at rev
	stored map[string]*Job  // id → the record as read (nil: absent)
	writes map[string]*Job  // id → pending record (nil: delete)
	order  []string         // ids of writes, in first-write order
	send   *Job             // a pending record that journals a new send, if any
}

func (s *EtcdStore) newTx(write bool) *etcdTx {
	return &etcdTx{s: s, write: write, reads: map[string]int64{}, stored: map[string]*Job{}, writes: map[string]*Job{}}
}

func (t *etcdTx) revOpt() []clientv3.OpOption {
	if t.rev == 0 {
		return nil
	}
	return []clientv3.OpOption{clientv3.WithRev(t.rev)}
}

func (t *etcdTx) pin(rev int64) {
	if t.rev == 0 {
		t.rev = rev
	}
}

// Get implements Tx: pending writes first, then both keys of the job at the snapshot revision.
func (t *etcdTx) Get(id string) (Job, error) {
	if j, ok := t.writes[id]; ok {
		if j == nil {
			return Job{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return j.clone(), nil
	}
	ctx, cancel := t.s.opCtx()
	defer cancel()
	ak, dk := t.s.activeKey(id), t.s.doneKey(id)
	resp, err := t.s.cli.Txn(ctx).Then(clientv3.OpGet(ak, t.revOpt()...), clientv3.OpGet(dk, t.revOpt()...)).Commit()
	if err != nil {
		return Job{}, fmt.Errorf("dispatch: etcd get %s: %w", id, err)
	}
	t.pin(resp.Header.Revision)
	var found *Job
	var foundRev int64
	for i, k := range []string{ak, dk} {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		t.reads[k] = 0
		if len(kvs) == 0 {
			continue
		}
		t.reads[k] = kvs[0].ModRevision
		j, err := t.s.cache.job(k, kvs[0].Value, 0, true, decodeJob)
		if err != nil {
			return Job{}, err
		}
		if found == nil || kvs[0].ModRevision > foundRev {
			found, foundRev = &j, kvs[0].ModRevision
		}
	}
	t.stored[id] = found
	if found == nil {
		return Job{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return *found, nil
}

// Put implements Tx.
func (t *etcdTx) Put(j *Job) error {
	if !t.write {
		return ErrReadOnly
	}
	c := j.clone() // the caller keeps j; a pending write shares nothing with it
	prev, read := t.stored[j.ID]
	if w, ok := t.writes[j.ID]; ok && w != nil {
		prev, read = w, true
	}
	if c.State == StateRunning && c.InvocationID != "" && (!read || prev == nil || prev.InvocationID != c.InvocationID) {
		t.send = &c
	}
	t.stage(j.ID, &c)
	return nil
}

// Delete implements Tx.
func (t *etcdTx) Delete(id string) error {
	if !t.write {
		return ErrReadOnly
	}
	t.stage(id, nil)
	return nil
}

func (t *etcdTx) stage(id string, j *Job) {
	if _, ok := t.writes[id]; !ok {
		t.order = append(t.order, id)
	}
	t.writes[id] = j
}

// Active implements Tx: one range read of active/, with pending writes applied.
func (t *etcdTx) Active(fn func(Job) error) error {
	return t.each(fn, t.s.prefix+"/active/")
}

// All implements Tx: the active and the done jobs, merged in id order.
func (t *etcdTx) All(fn func(Job) error) error {
	return t.each(fn, t.s.prefix+"/active/", t.s.prefix+"/done/")
}

// rangePage bounds one range response (a done job is about 5.5 KiB).
const rangePage = 500

func (t *etcdTx) each(fn func(Job) error, prefixes ...string) error {
	jobs := map[string]Job{}
	activeOnly := len(prefixes) == 1
	var gen uint64 // a read of the active jobs alone keeps and sweeps the cache's entries
	if activeOnly {
		gen = t.s.cache.begin()
	}
	for _, p := range prefixes {
		if err := t.scan(p, gen, func(id string, j Job) { jobs[id] = j }); err != nil {
			return err
		}
	}
	if activeOnly {
		t.s.cache.sweep(gen)
	}
	for id, w := range t.writes {
		switch {
		case w == nil || (activeOnly && !w.Active()):
			delete(jobs, id)
		default:
			jobs[id] = w.clone()
		}
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := fn(jobs[id]); err != nil {
			return err
		}
	}
	return nil
}

// scan reads every key under prefix at the snapshot revision, a page at a time, decoding the
// records the cache does not hold; it adds what it decodes to the cache's read gen (0: adds none).
func (t *etcdTx) scan(prefix string, gen uint64, fn func(id string, j Job)) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		ctx, cancel := t.s.opCtx()
		opts := append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(rangePage)}, t.revOpt()...)
		resp, err := t.s.cli.Get(ctx, from, opts...)
		cancel()
		if err != nil {
			return fmt.Errorf("dispatch: etcd range %s: %w", prefix, err)
		}
		t.pin(resp.Header.Revision)
		for _, kv := range resp.Kvs {
			j, err := t.s.cache.job(string(kv.Key), kv.Value, gen, gen != 0, decodeJob)
			if err != nil {
				return err
			}
			fn(strings.TrimPrefix(string(kv.Key), prefix), j)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	if !slices.Contains(t.ranges, prefix) {
		t.ranges = append(t.ranges, prefix)
	}
	return nil
}

// commit writes the pending records in one transaction. It compares every key read by mod
// revision, every range read by the snapshot revision (a key added or changed in the range since
// fails it; a key removed does not: removal from the active range only frees a slot or a quota),
// and, when a record journals a new send, the node's claim. It reports false on a conflict.
func (t *etcdTx) commit() (bool, error) {
	if len(t.order) == 0 {
		return true, nil
	}
	var cmps []clientv3.Cmp
	for k, rev := range t.reads {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", rev))
	}
	for _, p := range t.ranges {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(p), "<", t.rev+1).WithPrefix())
	}
	var claimCmp []clientv3.Op
	if t.send != nil {
		node, lease := t.s.Node()
		if node == "" || t.send.Node != node || t.send.Claim != lease || lease == 0 {
			return false, fmt.Errorf("%w: job %s is journaled for node %q claim %x; this store holds %q claim %x",
				ErrClaimLost, t.send.ID, t.send.Node, t.send.Claim, node, lease)
		}
		cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(t.s.nodeKey()), "=", lease))
		claimCmp = append(claimCmp, clientv3.OpGet(t.s.nodeKey()))
	}
	var ops []clientv3.Op
	for _, id := range t.order {
		ops = append(ops, t.opsFor(id)...)
	}
	ctx, cancel := t.s.opCtx()
	defer cancel()
	resp, err := t.s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(claimCmp...).Commit()
	if err != nil {
		return false, fmt.Errorf("dispatch: etcd commit: %w", err)
	}
	if resp.Succeeded {
		t.s.commits.Add(1)
		return true, nil
	}
	if t.send != nil {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 || kvs[0].Lease != t.send.Claim {
			return false, fmt.Errorf("%w: node %s (claim %x) before journaling job %s", ErrClaimLost, t.send.Node, t.send.Claim, t.send.ID)
		}
	}
	return false, nil
}

// opsFor writes (or deletes) job id's record under the key of its activity and removes the
// other key where it was seen, or might be.
func (t *etcdTx) opsFor(id string) []clientv3.Op {
	ak, dk := t.s.activeKey(id), t.s.doneKey(id)
	_, read := t.stored[id]
	present := func(k string) bool { return !read || t.reads[k] != 0 }
	var ops []clientv3.Op
	j := t.writes[id]
	keep := ""
	if j != nil {
		keep = dk
		if j.Active() {
			keep = ak
		}
		v, _ := json.Marshal(etcdRecord{Format: etcdFormat, Job: j})
		ops = append(ops, clientv3.OpPut(keep, string(v)))
	}
	for _, k := range []string{ak, dk} {
		if k != keep && present(k) {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	return ops
}

func maps2slice(m map[string]string) [][2]string {
	out := make([][2]string, 0, len(m))
	for e, sc := range m {
		out = append(out, [2]string{sc, e})
	}
	return out
}
