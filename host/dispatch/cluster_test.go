package dispatch

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/host"
	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/cba1309c/steward/internal/testing/testetcd"
	"github.com/cba1309c/steward/internal/testing/testsidecar"
	"github.com/cba1309c/steward/rpc"
	"github.com/hashicorp/go-hclog"
)

// The cluster-node helper: the test binary re-executed with clusterHelperEnv set runs one
// dispatcher node on a shared etcd journal with its own real sidecar child, prints "READY" and
// then one "SEND <invocation>" line before each index.mutate leaves for its sidecar (the last
// point before the wire), until it is killed.
const (
	clusterHelperEnv = "STEWARD_DISPATCH_CLUSTER_NODE"
	clusterEndpoints = "STEWARD_DISPATCH_ETCD"
	clusterPrefix    = "STEWARD_DISPATCH_ETCD_PREFIX"
	// Optional: the node's sidecar name (default "sidecar", the same on every node), extra
	// flags for its `steward serve` (a JSON array), and a SegmentedRequest (JSON) the node
	// submits once ready, printing "JOB <id>", with two sends in flight per sidecar.
	clusterSidecarName = "STEWARD_DISPATCH_SIDECAR_NAME"
	clusterSidecarArgs = "STEWARD_DISPATCH_SIDECAR_ARGS"
	clusterSegmented   = "STEWARD_DISPATCH_SEGMENTED"
)

// logged is a real sidecar that reports each send on stdout before making it.
type logged struct {
	*host.Client
	mu sync.Mutex
}

func (c *logged) Mutate(ctx context.Context, p rpc.MutateParams) (rpc.MutateResult, error) {
	c.mu.Lock()
	fmt.Printf("SEND %s %s\n", p.InvocationID, p.JobID)
	c.mu.Unlock()
	return c.Client.Mutate(ctx, p)
}

func clusterHelperMain() int {
	fail := func(err error) int { fmt.Println("ERROR", err); return 1 }
	node := os.Getenv(clusterHelperEnv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := OpenEtcd(ctx, EtcdOptions{Endpoints: strings.Split(os.Getenv(clusterEndpoints), ","),
		Prefix: os.Getenv(clusterPrefix), Node: node, LeaseTTL: 2 * time.Second})
	cancel()
	if err != nil {
		return fail(err)
	}
	var extra []string
	if a := os.Getenv(clusterSidecarArgs); a != "" {
		if err := json.Unmarshal([]byte(a), &extra); err != nil {
			return fail(err)
		}
	}
	sc, err := startSidecar(os.Getenv(helperBin), os.Getenv(helperParent), hclog.NewNullLogger(), extra...)
	if err != nil {
		return fail(err)
	}
	segmented := os.Getenv(clusterSegmented)
	cfg := Config{Store: s, Interval: 50 * time.Millisecond, ExecuteDeadline: 6 * time.Second,
		AnswerGrace: 5 * time.Second, ResolveRetryInterval: 500 * time.Millisecond, MaxPerRound: 4,
		Logger: hclog.New(&hclog.LoggerOptions{Name: node, Level: hclog.Warn, Output: os.Stderr})}
	if segmented != "" {
		cfg.MaxInFlightPerSidecar = 2
	}
	d, err := New(cfg)
	if err != nil {
		return fail(err)
	}
	name := cmp.Or(os.Getenv(clusterSidecarName), "sidecar")
	if err := d.AddSidecar(name, &logged{Client: sc}); err != nil {
		return fail(err)
	}
	fmt.Println("READY", sc.Epoch())
	if segmented != "" {
		var req SegmentedRequest
		if err := json.Unmarshal([]byte(segmented), &req); err != nil {
			return fail(err)
		}
		j, err := d.SubmitSegmented(context.Background(), req)
		if err != nil {
			return fail(err)
		}
		fmt.Println("JOB", j.ID)
	}
	return fail(d.Run(context.Background()))
}

// clusterNode is one helper process of the test.
type clusterNode struct {
	name   string
	cmd    *exec.Cmd
	parent string
	ready  chan struct{}
	job    chan string // the id of the segmented job it submitted
	mu     sync.Mutex
	sends  []string // invocation ids, in order
}

// startClusterNode starts the helper as node name, with env added to its environment.
func startClusterNode(t *testing.T, c *testetcd.Cluster, prefix, name string, env ...string) *clusterNode {
	t.Helper()
	n := &clusterNode{name: name, parent: randID("steward-dispatch-test-"), ready: make(chan struct{}), job: make(chan string, 1)}
	t.Cleanup(func() { testsidecar.CheckLeftovers(t, n.parent) })
	n.cmd = exec.Command(os.Args[0], "-test.run=^$")
	n.cmd.Env = append(append(os.Environ(), clusterHelperEnv+"="+name, clusterEndpoints+"="+strings.Join(c.Endpoints, ","),
		clusterPrefix+"="+prefix, helperBin+"="+testbin.Steward(t), helperParent+"="+n.parent), env...)
	n.cmd.Stderr = os.Stderr
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		n.cmd.Wait()
		<-done
	})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) > 0 && f[0] == "READY":
				close(n.ready)
			case len(f) == 2 && f[0] == "JOB":
				n.job <- f[1]
			case len(f) == 3 && f[0] == "SEND":
				n.mu.Lock()
				n.sends = append(n.sends, f[1])
				n.mu.Unlock()
			default:
				t.Logf("%s: %s", name, sc.Text())
			}
		}
	}()
	select {
	case <-n.ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("%s never ready", name)
	}
	return n
}

func (n *clusterNode) sent() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.sends...)
}

// TestClusterNodeKilledMidRound runs three dispatcher processes, each with its own real sidecar,
// on one 3-member etcd journal, and SIGKILLs one of them while it has jobs running (its sidecar
// dies with it). Every invocation id is sent at most once across the cluster; every job settles
// with its slot free: the killed node's jobs at their deadline, through index.resolve on a live
// node's sidecar.
func TestClusterNodeKilledMidRound(t *testing.T) {
	testenv.NeedRoot(t)
	c := testetcd.Shared(t)
	prefix := testetcd.Prefix(t)
	data := newRealData(t)
	admin := openEtcdStore(t, c, prefix, "") // a node without a claim: it admits, never sends
	d, err := New(Config{Store: admin, Logger: quietLog(), MaxUnresolvedPerDataset: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	const jobCount = 12 // one per dataset: each may commit at version 2
	var ids []string
	for i := range jobCount {
		r := createReq(data.make(fmt.Sprintf("ds%d", i), 1), 1, "by_id", "id")
		if i%4 == 0 {
			r.Fault = "hang" // runs until its sidecar kills it at the deadline
		}
		j, err := d.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	var nodes []*clusterNode
	for i := range 3 {
		nodes = append(nodes, startClusterNode(t, c, prefix, fmt.Sprintf("node-%d", i)))
	}
	victim := nodes[0]
	deadline := time.Now().Add(60 * time.Second)
	for len(victim.sent()) == 0 { // the victim is mid-round: it has journaled and sent
		if time.Now().After(deadline) {
			t.Fatal("node-0 never sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()

	deadline = time.Now().Add(120 * time.Second)
	var jobs []Job
	for {
		jobs, err = d.List(ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, j := range jobs {
			if !j.State.Settled() || j.SlotHeld {
				open++
			}
		}
		if open == 0 && len(jobs) == len(ids) {
			break
		}
		if time.Now().After(deadline) {
			for _, j := range jobs {
				t.Logf("%s %s held %t node %s: %s", j.ID, j.State, j.SlotHeld, j.Node, historyEvents(j))
			}
			t.Fatalf("%d of %d jobs not settled", open, len(jobs))
		}
		time.Sleep(100 * time.Millisecond)
	}
	settledIn := time.Since(killedAt)

	sends := map[string]int{}
	perNode := map[string]int{}
	for _, n := range nodes {
		for _, inv := range n.sent() {
			sends[inv]++
			perNode[n.name]++
		}
	}
	outcomes := map[State]int{}
	resolved, victimJobs := 0, 0
	for _, j := range jobs {
		outcomes[j.State]++
		if n := strings.Count(historyEvents(j), "dispatch:"); n != 1 {
			t.Errorf("job %s journaled %d sends: %s", j.ID, n, historyEvents(j))
		}
		if sends[j.InvocationID] > 1 {
			t.Errorf("invocation %s of job %s sent %d times", j.InvocationID, j.ID, sends[j.InvocationID])
		}
		if j.Resolution != nil {
			resolved++
		}
		if j.Node == victim.name {
			victimJobs++
		}
	}
	for inv, n := range sends {
		if n > 1 {
			t.Errorf("invocation %s sent %d times", inv, n)
		}
	}
	if victimJobs == 0 {
		t.Error("the killed node journaled no job")
	}
	t.Logf("jobs %d, outcomes %v, sends per node %v, invocations sent %d (max 1 each), jobs of the killed node %d, settled by index.resolve %d, all settled %s after the kill",
		len(jobs), outcomes, perNode, len(sends), victimJobs, resolved, settledIn.Round(100*time.Millisecond))
}
