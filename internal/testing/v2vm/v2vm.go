// Package v2vm boots a pure cgroup v2 Linux kernel under QEMU with an initramfs of the project's
// own static binaries, runs them there as a list of steps, and reads each step's output and exit
// code off the serial console. It exists because the project's machines are hybrid (v1 memory and
// pids, a controller-less cgroup2) while production hosts run pure v2: isolation's v2 path can
// only run for real in a VM of its own.
//
// The kernels and QEMU come from scripts/v2vm.sh (pinned Debian packages, cached in the tools
// dir): 6.1 cloud, booted with the initramfs alone, and 6.12 generic, which can also take the
// host's root shared read-only over virtio-9p as its own (HostRoot: the Lance engine's Python).
// The guest's PID 1 is guestinit; the console protocol is in its doc comment. Only tests and
// tools import this package.
package v2vm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
)

// Tools is what a boot needs from the host.
type Tools struct {
	QEMU     string   // qemu-system-x86_64
	Kernel   string   // the pinned kernel's bzImage
	Modules  []string // kernel modules the guest loads, in order (HostRoot needs 9p and overlay)
	Versions string   // the pinned package versions (scripts/v2vm.sh version)
}

// ErrNoTools: scripts/v2vm.sh has not installed the VM's QEMU or kernel.
var ErrNoTools = errors.New("v2vm: QEMU or the kernel is missing")

// FindTools finds what scripts/v2vm.sh installed.
func FindTools() (Tools, error) {
	kernel, err := testbin.Tool(filepath.Join("v2vm", "vmlinuz"), "scripts/v2vm.sh install")
	if err != nil {
		return Tools{}, fmt.Errorf("%w: %w", ErrNoTools, err)
	}
	versions, err := os.ReadFile(filepath.Join(filepath.Dir(kernel), "versions"))
	if err != nil {
		return Tools{}, fmt.Errorf("%w: run scripts/v2vm.sh install: %w", ErrNoTools, err)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		return Tools{}, fmt.Errorf("%w: run scripts/v2vm.sh install: %w", ErrNoTools, err)
	}
	return Tools{QEMU: qemu, Kernel: kernel, Versions: strings.TrimSpace(string(versions))}, nil
}

// FindTools612 finds the 6.12 generic kernel scripts/v2vm.sh installed with the modules its
// HostRoot boot loads (9p, 9pnet_virtio, overlay and their dependencies).
func FindTools612() (Tools, error) {
	t, err := FindTools()
	if err != nil {
		return Tools{}, err
	}
	dir := filepath.Join(filepath.Dir(t.Kernel), "6.12")
	t.Kernel = filepath.Join(dir, "vmlinuz")
	order, err := os.ReadFile(filepath.Join(dir, "modules.load"))
	if err != nil {
		return Tools{}, fmt.Errorf("%w: the 6.12 kernel: run scripts/v2vm.sh install: %w", ErrNoTools, err)
	}
	if _, err := os.Stat(t.Kernel); err != nil {
		return Tools{}, fmt.Errorf("%w: the 6.12 kernel: run scripts/v2vm.sh install: %w", ErrNoTools, err)
	}
	for _, m := range strings.Fields(string(order)) {
		t.Modules = append(t.Modules, filepath.Join(dir, "modules", m))
	}
	return t, nil
}

// File is one regular file of the initramfs.
type File struct {
	Path string // absolute, in the guest
	Mode os.FileMode
	Src  string // host file to copy, or
	Data []byte // the contents
}

// Step is one command the guest runs (guestinit's step).
type Step struct {
	Name     string
	Args     []string // Args[0]: an absolute path in the initramfs
	Env      []string // the whole environment
	UID      int      // run as this uid and gid (0: root)
	Cgroup   string   // cgroup2 directory to start it in ("": the root)
	Delegate string   // a cgroup created and chowned to UID first (Delegate=yes); a Cgroup below it too
	Timeout  int      // seconds (0: 300); the step is SIGKILLed after it
}

// Options size the VM.
type Options struct {
	MemoryMiB int           // guest RAM; default 1024
	CPUs      int           // default 2
	Timeout   time.Duration // the whole boot, to power-off; default 10 minutes
	// HostRoot shares the host's / read-only over virtio-9p and makes it the guest's root under a
	// tmpfs overlay (guestinit's root.json): the steps run the host's programs at their host
	// paths. The initramfs's /v2 and /v2vm are bound into it. Needs Tools.Modules.
	HostRoot bool
	// Init, with HostRoot, replaces guestinit once the root is switched (the host's systemd),
	// after the initramfs's /v2vm/etc is copied into /etc; it prints the console markers itself
	// and runs no plan.
	Init []string
}

// hostRootTag is the virtio-9p mount tag of the host's root.
const hostRootTag = "hostroot"

// Result is what the console said.
type Result struct {
	Kernel      string        // the guest's uname -r
	Controllers string        // the root's cgroup.controllers
	Boot        time.Duration // QEMU's start to guestinit's first line
	Wall        time.Duration // QEMU's start to its exit
	Steps       []StepResult
	Done        bool     // guestinit ran every step and said so
	Console     []string // every line, markers included
	// Rebooted is set when a first boot's kernel panicked before init and the VM was booted
	// again (Boot); it names the first boot's panic.
	Rebooted string
}

// StepResult is one step's exit code, wall time in the guest and output.
type StepResult struct {
	Name  string
	Exit  int // -1: killed (its timeout)
	Took  time.Duration
	Lines []string
}

// Step returns the result of the step called name, if it ran.
func (r Result) Step(name string) (StepResult, bool) {
	for _, s := range r.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return StepResult{}, false
}

// Boot builds the initramfs (init, the files and the plan of steps) in dir, boots it and parses
// the console. It returns an error when QEMU could not run or exited without guestinit's "done":
// the Result holds the console up to there.
func Boot(ctx context.Context, tools Tools, dir, init string, files []File, steps []Step, o Options) (Result, error) {
	if o.MemoryMiB == 0 {
		o.MemoryMiB = 1024
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	plan, err := json.Marshal(steps)
	if err != nil {
		return Result{}, fmt.Errorf("v2vm: plan: %w", err)
	}
	files = append([]File{{Path: "/init", Mode: 0o755, Src: init}, {Path: "/v2vm/plan.json", Mode: 0o644, Data: plan}}, files...)
	var virtfs []string
	if o.HostRoot {
		root, mods, err := rootConfig(tools.Modules, o.Init)
		if err != nil {
			return Result{}, err
		}
		files = append(append(files, File{Path: "/v2vm/root.json", Mode: 0o644, Data: root}), mods...)
		// multidevs=remap: the host's / spans several filesystems; their inode numbers are
		// remapped so that none collide in the guest.
		virtfs = []string{"-virtfs", "local,path=/,mount_tag=" + hostRootTag + ",security_model=none,readonly=on,multidevs=remap"}
	}
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := writeInitramfs(initrd, files); err != nil {
		return Result{}, err
	}
	r, err := runQEMU(ctx, tools, initrd, virtfs, o)
	if err != nil && panickedBeforeInit(r) {
		// Under multi-threaded TCG the 6.12 kernel now and then dies patching its own text at
		// boot (an int3 Oops in sched_clock_cpu, 2 s in, before any user process): the
		// emulator's fault, not the code under test. A panic before the guest's first marker
		// gets one fresh boot, logged; a second one fails the test.
		first := r
		r, err = runQEMU(ctx, tools, initrd, virtfs, o)
		r.Rebooted = "the first boot panicked before init: " + panicLine(first.Console)
	}
	return r, err
}

// runQEMU boots the kernel with initrd once and parses its console.
func runQEMU(ctx context.Context, tools Tools, initrd string, virtfs []string, o Options) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	// TCG: this project's /dev/kvm is PVM-based and does not boot a stock kernel (docs/PERFORMANCE.md §5).
	args := append([]string{
		"-accel", "tcg,thread=multi", "-cpu", "max", "-m", strconv.Itoa(o.MemoryMiB), "-smp", strconv.Itoa(o.CPUs),
		"-nographic", "-no-reboot", "-net", "none", "-kernel", tools.Kernel, "-initrd", initrd,
		"-append", "console=ttyS0 cgroup_no_v1=all panic=-1 quiet"}, virtfs...)
	cmd := exec.CommandContext(ctx, tools.QEMU, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Result{}, fmt.Errorf("v2vm: %w", err)
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return Result{}, fmt.Errorf("v2vm: start %s: %w", tools.QEMU, err)
	}
	r := parse(out, t0)
	werr := cmd.Wait()
	r.Wall = time.Since(t0)
	switch {
	case ctx.Err() != nil:
		return r, fmt.Errorf("v2vm: no power-off within %v: %w", o.Timeout, ctx.Err())
	case werr != nil:
		return r, fmt.Errorf("v2vm: qemu: %w: %s", werr, strings.TrimSpace(stderr.String()))
	case !r.Done:
		return r, fmt.Errorf("v2vm: the guest stopped before running every step (last lines: %s)", tail(r.Console, 5))
	}
	return r, nil
}

// panickedBeforeInit: the kernel panicked before the guest printed its first marker (guestinit's,
// or with Options.Init the test's own).
func panickedBeforeInit(r Result) bool {
	return r.Kernel == "" && panicLine(r.Console) != ""
}

// panicLine is the console's first "Kernel panic" or "Oops" line, "" if none.
func panicLine(lines []string) string {
	for _, l := range lines {
		if strings.Contains(l, "Kernel panic") || strings.Contains(l, "Oops:") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// rootConfig is guestinit's root.json for a HostRoot boot and the module files it names.
func rootConfig(modules, init []string) ([]byte, []File, error) {
	if len(modules) == 0 {
		return nil, nil, errors.New("v2vm: a HostRoot boot needs the kernel's 9p and overlay modules (FindTools612)")
	}
	c := struct {
		Modules      []string
		Tag, Options string
		Binds, Init  []string
	}{Tag: hostRootTag, Binds: []string{"/v2", "/v2vm"}, Init: init,
		// The host's files do not change under a test: the guest caches them (cache=loose), and
		// reads in 512 KiB messages.
		Options: "version=9p2000.L,msize=524288,cache=loose"}
	var files []File
	for _, m := range modules {
		p := "/v2vm/modules/" + filepath.Base(m)
		c.Modules = append(c.Modules, p)
		files = append(files, File{Path: p, Mode: 0o644, Src: m})
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, nil, fmt.Errorf("v2vm: root.json: %w", err)
	}
	return b, files, nil
}

// parse reads the console until QEMU closes it.
func parse(out io.Reader, t0 time.Time) Result {
	var r Result
	var cur *StepResult
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		r.Console = append(r.Console, line)
		// The first marker follows SeaBIOS's terminal escapes on the same line.
		_, rest, marker := strings.Cut(line, "v2vm: ")
		switch {
		case !marker:
			if cur != nil {
				cur.Lines = append(cur.Lines, line)
			}
		case strings.HasPrefix(rest, "kernel "):
			r.Kernel, r.Boot = strings.TrimPrefix(rest, "kernel "), time.Since(t0)
		case strings.HasPrefix(rest, "controllers "):
			r.Controllers = strings.TrimPrefix(rest, "controllers ")
		case strings.HasPrefix(rest, "begin "):
			r.Steps = append(r.Steps, StepResult{Name: strings.TrimPrefix(rest, "begin ")})
			cur = &r.Steps[len(r.Steps)-1]
		case strings.HasPrefix(rest, "end ") && cur != nil:
			var name string
			var ms int64
			if _, err := fmt.Sscanf(rest, "end %s exit %d ms %d", &name, &cur.Exit, &ms); err != nil || name != cur.Name {
				cur.Lines = append(cur.Lines, line)
				continue
			}
			cur.Took, cur = time.Duration(ms)*time.Millisecond, nil
		case rest == "done":
			r.Done = true
		default:
			if cur != nil {
				cur.Lines = append(cur.Lines, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		// A line past the buffer: keep QEMU writing (it would block on a full pipe) until it exits.
		r.Console = append(r.Console, "v2vm: console unreadable: "+err.Error())
		_, _ = io.Copy(io.Discard, out)
	}
	return r
}

func tail(lines []string, n int) string {
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// writeInitramfs writes files, and every directory above them, as an uncompressed newc cpio
// archive with /dev/console (the kernel opens it for init's stdio before devtmpfs is mounted).
func writeInitramfs(name string, files []File) (retErr error) {
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("v2vm: initramfs: %w", err)
	}
	defer func() {
		if err := f.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("v2vm: initramfs: %w", err)
		}
	}()
	w := &cpioWriter{w: bufio.NewWriterSize(f, 1<<20)}
	dirs := map[string]bool{"/dev": true}
	for _, fl := range files {
		for d := path.Dir(fl.Path); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted) // parents before children
	for _, d := range sorted {
		w.entry(d, 0o040755, 0, nil)
	}
	w.entry("/dev/console", 0o020600, 5<<8|1, nil)
	for _, fl := range files {
		data := fl.Data
		if fl.Src != "" {
			if data, err = os.ReadFile(fl.Src); err != nil {
				return fmt.Errorf("v2vm: initramfs: %w", err)
			}
		}
		w.entry(fl.Path, 0o100000|uint32(fl.Mode.Perm()), 0, data)
	}
	w.entry("TRAILER!!!", 0, 0, nil)
	return w.flush()
}

// cpioWriter writes the "newc" format (cpio -H newc), the one the kernel unpacks.
type cpioWriter struct {
	w   *bufio.Writer
	ino uint32
	err error
}

// entry writes one member; rdev is major<<8|minor for a device node.
func (c *cpioWriter) entry(name string, mode, rdev uint32, data []byte) {
	if c.err != nil {
		return
	}
	name = strings.TrimPrefix(name, "/")
	c.ino++
	nlink := uint32(1)
	if mode&0o040000 != 0 {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev>>8, rdev&0xff, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad(len(hdr) + len(name) + 1)
	c.write(data)
	c.pad(len(data))
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

// pad aligns the archive to 4 bytes after n bytes written (every header starts aligned).
func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) flush() error {
	if c.err == nil {
		c.err = c.w.Flush()
	}
	if c.err != nil {
		return fmt.Errorf("v2vm: initramfs: %w", c.err)
	}
	return nil
}
