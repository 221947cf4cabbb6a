package isolation

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The test binary re-executes itself as workers and their descendants (go-plugin's
// helperProcess pattern): TestMain runs the behaviour named by helperEnv instead of the tests.
const (
	helperEnv = "STEWARD_TEST_HELPER"
	runEnv    = "STEWARD_TEST_RUN"    // marks every process of this suite: "<pid of go test binary>"
	parentEnv = "STEWARD_TEST_PARENT" // cgroup parent for the sidecar helper
	modeEnv   = "STEWARD_TEST_MODE"
)

// helpers that are workers (they call EnterWorker first) or descendants of workers.
var helpers = map[string]func(){
	"noop": func() { enter() },
	"noop-contained": func() {
		enter()
		if err := Contain(Policy{}); err != nil {
			fmt.Fprintln(os.Stderr, "Contain:", err)
			os.Exit(ExitRefused)
		}
	},
	"exit3":    func() { enter(); os.Exit(3) },
	"alloc":    helperAlloc,
	"forkbomb": helperForkBomb,
	"tree":     helperTree,
	"orphaner": helperOrphaner,
	"zombies":  helperZombies,
	"ignoreterm": func() {
		enter()
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		report("ready")
		sleepForever()
	},
	"ignoreterm-no": func() { enter(); report("ready"); sleepForever() },
	"spin": func() {
		enter()
		report("ready")
		for x := 0; ; x++ { // burns a CPU until killed (or frozen)
			spinSink = x
		}
	},
	"envcheck": helperEnvCheck,
	"cpus":     helperCPUs,
	"sidecar":  helperSidecar,
	// pure cgroup v2: v2_linux_test.go adds its own (built with the v2guest tag only)
	// descendants (no EnterWorker: their parent is a worker, not the supervisor)
	"block": func() {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		report(os.Getenv("STEWARD_TEST_KIND"))
		sleepForever()
	},
	"chain": func() {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
		spawn("block", "chainkid", false)
		report("chain")
		sleepForever()
	},
	"escape": func() { spawn("block", "escapee", true); os.Exit(0) },
}

// spinSink keeps the spin helper's loop from being optimized away.
var spinSink int

func enter() {
	if err := EnterWorker(); err != nil {
		fmt.Fprintln(os.Stderr, "EnterWorker:", err)
		os.Exit(ExitRefused)
	}
}

// report writes "<kind> <pid> <sid>\n" to fd 3 when there is one; lines under PIPE_BUF are atomic.
func report(kind string) {
	if kind == "" {
		return
	}
	sid, _ := unix.Getsid(0)
	_, _ = unix.Write(3, []byte(fmt.Sprintf("%s %d %d\n", kind, os.Getpid(), sid)))
}

// spawn starts the test binary as helper h, passing fd 3 on; it does not wait for it.
func spawn(h, kind string, setsid bool) *exec.Cmd {
	cmd := exec.Command("/proc/self/exe")
	cmd.Env = append(os.Environ(), helperEnv+"="+h, "STEWARD_TEST_KIND="+kind)
	if f := os.NewFile(3, "report"); f != nil {
		cmd.ExtraFiles = []*os.File{f}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: setsid}
	if err := cmd.Start(); err != nil {
		return nil
	}
	return cmd
}

func helperAlloc() {
	enter()
	helperAllocate()
}

// helperAllocate touches 8 MiB after 8 MiB until the OOM killer ends the process.
func helperAllocate() {
	var keep [][]byte
	for {
		b := make([]byte, 8<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
}

func helperForkBomb() {
	enter()
	signal.Ignore(syscall.SIGTERM)
	for {
		if spawn("block", "", false) == nil {
			time.Sleep(time.Millisecond)
		}
	}
}

// helperTree builds 50 descendants: 20 leaves, 10 chains of two, 10 double-forked setsid
// escapees (their intermediate parent exits at once).
func helperTree() {
	enter()
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for range 20 {
		spawn("block", "leaf", false)
	}
	for range 10 {
		spawn("chain", "", false)
	}
	for range 10 {
		if c := spawn("escape", "", false); c != nil {
			go c.Wait()
		}
	}
	sleepForever()
}

// helperZombies leaves 5 exited, unreaped children (each the intermediate of a setsid escapee)
// and reports once all of them are zombies: in v1 only their parent's children files tie them
// to the domain.
func helperZombies() {
	enter()
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	var kids []int
	for range 5 {
		if c := spawn("escape", "", false); c != nil {
			kids = append(kids, c.Process.Pid)
		}
	}
	for _, k := range kids {
		for {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", k))
			if i := bytes.LastIndexByte(b, ')'); err != nil || (i > 0 && i+2 < len(b) && b[i+2] == 'Z') {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	report("zombies")
	sleepForever()
}

func helperOrphaner() {
	enter()
	for range 5 {
		spawn("block", "orphan", false)
	}
	os.Exit(0)
}

type envReport struct {
	Env        []string
	Dumpable   int
	NoNewPrivs string
	Core       uint64
	NoFile     uint64
	FDs        map[int]string
	PPid       int
}

func helperEnvCheck() {
	enter()
	var r envReport
	r.Env = os.Environ()
	d, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	r.Dumpable = d
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == "NoNewPrivs" {
			r.NoNewPrivs = strings.TrimSpace(v)
		}
	}
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_CORE, &lim)
	r.Core = lim.Max
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	r.NoFile = lim.Max
	r.FDs = map[int]string{}
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		fd, _ := strconv.Atoi(e.Name())
		r.FDs[fd], _ = os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
	}
	r.PPid = os.Getppid()
	out, _ := json.Marshal(r)
	_, _ = unix.Write(3, append(out, '\n'))
}

// helperSidecar plays a sidecar: New, start one SIGTERM-ignoring worker, print
// "<worker pid> <cgroup path>" and block until SIGKILLed by the test.
func helperSidecar() {
	s, err := New(Config{Parent: os.Getenv(parentEnv), Mode: Mode(os.Getenv(modeEnv))})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	r, w, _ := os.Pipe()
	d, err := s.Start(contextBackground(), Spec{
		Env:        []string{helperEnv + "=ignoreterm", runEnv + "=" + os.Getenv(runEnv)},
		ExtraFiles: []*os.File{w},
	})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	w.Close()
	line, _ := bufio.NewReader(r).ReadString('\n')
	if !strings.HasPrefix(line, "ready") {
		fmt.Println("ERR worker not ready")
		os.Exit(1)
	}
	fmt.Printf("%d %s\n", d.Pid(), s.CgroupPath(d))
	sleepForever()
}

// sleepForever blocks without tripping the runtime's "all goroutines are asleep" check.
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// hierarchyRoots lists every mounted hierarchy root isolation may use.
func hierarchyRoots() []string {
	var roots []string
	for _, h := range mountedHierarchies() {
		roots = append(roots, hierarchyRoot(h))
	}
	return roots
}

// helperCPUs reports "born-<GOMAXPROCS>", waits for a byte on fd 4, widens its CPUs, starts
// eight threads (goroutines locked to their threads, blocked in a read of a pipe: more than a
// worker has at birth, so the runtime must create some), reports
// "widened-<GOMAXPROCS>" and exits after the next byte. Contained when STEWARD_TEST_CONTAIN=1.
func helperCPUs() {
	enter()
	if os.Getenv("STEWARD_TEST_CONTAIN") == "1" {
		if err := Contain(Policy{}); err != nil {
			fmt.Fprintln(os.Stderr, "Contain:", err)
			os.Exit(ExitRefused)
		}
	}
	next := func() {
		var b [1]byte
		if n, err := unix.Read(4, b[:]); n != 1 || err != nil {
			os.Exit(4)
		}
	}
	report(fmt.Sprintf("born-%d", runtime.GOMAXPROCS(0)))
	next()
	if _, err := WidenCPUs(); err != nil {
		fmt.Fprintln(os.Stderr, "WidenCPUs:", err)
		os.Exit(3)
	}
	var hold [2]int
	if err := unix.Pipe2(hold[:], unix.O_CLOEXEC); err != nil {
		os.Exit(5)
	}
	var started sync.WaitGroup
	for range 8 {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			started.Done()
			var b [1]byte
			_, _ = unix.Read(hold[0], b[:]) // never written: holds the thread until exit
		}()
	}
	started.Wait()
	report(fmt.Sprintf("widened-%d", runtime.GOMAXPROCS(0)))
	next()
}
