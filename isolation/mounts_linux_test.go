package isolation

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/cba1309c/steward/internal/testing/testenv"
)

func init() {
	helpers["tempdir-guest"] = helperTempDirGuest
	helpers["sockets-guest"] = helperSocketsGuest
	helpers["exit7"] = func() { os.Exit(7) }
}

// faultEnv names the layers a guest takes away from itself before it enters its domain, to
// prove that a test catches what the layer holds: "mount-exec" (the temp dir's tmpfs without
// noexec), "landlock-exec" (Landlock lets it execute in its temp dir), "keep-tmp" (the host's
// /tmp left visible), "seccomp-memfd" (memfd_create allowed without MFD_NOEXEC_SEAL),
// comma-separated.
const faultEnv = "STEWARD_TEST_FAULT"

func plantFaults() {
	for _, f := range strings.Split(os.Getenv(faultEnv), ",") {
		switch f {
		case "mount-exec":
			tempMountAttrs &^= unix.MOUNT_ATTR_NOEXEC
		case "landlock-exec":
			writableAccess |= ll.AccessFSExecute
		case "keep-tmp":
			keptRoot = append(keptRoot, "tmp")
		case "seccomp-memfd":
			refuseExecMemfd = false
		}
	}
}

// tempGuest is what a contained guest saw of its temp dir: the mount's flags and size, its
// working directory, each attempt's errno name ("" when it succeeded), the exit code of the
// program it wrote there (-1 if it did not run), and how many bytes a fill wrote before it
// failed.
type tempGuest struct {
	TmpDir, Wd  string
	Flags, Size int64
	ExitCode    int
	MemfdExit   int // of the program run from a memfd (-1: it did not run)
	Filled      int64
	Attempts    map[string]string
}

// helperTempDirGuest writes a static program into TMPDIR and runs it, makes a FIFO and a
// device node there, fills it with STEWARD_TEST_FILL bytes (1 MiB writes) and, when that
// fails, removes the file and writes 1 MiB again. It reports on fd 3 and waits to be killed.
func helperTempDirGuest() {
	enterContained()
	tmp := os.Getenv("TMPDIR")
	g := tempGuest{TmpDir: tmp, ExitCode: -1, Attempts: map[string]string{}}
	g.Wd, _ = os.Getwd()
	var fs unix.Statfs_t
	g.Attempts["statfs"] = errName(unix.Statfs(tmp, &fs))
	g.Flags, g.Size = fs.Flags, int64(fs.Blocks)*fs.Bsize
	prog := filepath.Join(tmp, "exit7")
	err := os.WriteFile(prog, exitSevenProgram(), 0o755)
	if err == nil {
		err = exec.Command(prog).Run()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		g.ExitCode, err = exit.ExitCode(), nil
	}
	g.Attempts["exec"] = errName(err)
	g.MemfdExit, err = execMemfd(unix.MFD_CLOEXEC)
	g.Attempts["memfd exec"] = errName(err)
	_, err = execMemfd(unix.MFD_CLOEXEC | unix.MFD_NOEXEC_SEAL)
	g.Attempts["sealed memfd exec"] = errName(err)
	g.Attempts["mkfifo"] = errName(unix.Mkfifo(filepath.Join(tmp, "fifo"), 0o600))
	g.Attempts["mknod"] = errName(unix.Mknod(filepath.Join(tmp, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	g.Attempts["socket"] = errName(bindUnix(filepath.Join(tmp, "own.sock")))
	if n, _ := strconv.ParseInt(os.Getenv("STEWARD_TEST_FILL"), 10, 64); n > 0 {
		fill := filepath.Join(tmp, "fill")
		g.Filled, err = writeBytes(fill, n)
		g.Attempts["fill"] = errName(err)
		if err != nil {
			_ = os.Remove(fill)
			_, err = writeBytes(fill, 1<<20)
			g.Attempts["write after removing"] = errName(err)
		}
	}
	b, _ := json.Marshal(g)
	_, _ = unix.Write(3, append(b, '\n'))
	sleepForever()
}

// execMemfd writes the exit-7 program into a memfd made with flags and runs it from there
// (/proc/self/fd/3 in the child): its exit code, or -1 and why it did not run.
func execMemfd(flags int) (int, error) {
	fd, err := unix.MemfdCreate("exit7", flags)
	if err != nil {
		return -1, err
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	if _, err := f.Write(exitSevenProgram()); err != nil {
		return -1, err
	}
	cmd := exec.Command("/proc/self/fd/3")
	cmd.ExtraFiles = []*os.File{f}
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	return -1, err
}

// writeBytes writes n bytes to a new file at path in 1 MiB writes and returns how many it
// wrote before the first error.
func writeBytes(path string, n int64) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i)
	}
	var done int64
	for done < n {
		w, err := f.Write(chunk[:min(int64(len(chunk)), n-done)])
		done += int64(w)
		if err != nil {
			return done, err
		}
	}
	return done, f.Sync()
}

// bindUnix and dialUnix bind and connect a new unix stream socket to path, and close it.
func bindUnix(path string) error { return onUnixSocket(path, unix.Bind) }

func dialUnix(path string) error { return onUnixSocket(path, unix.Connect) }

func onUnixSocket(path string, op func(int, unix.Sockaddr) error) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return op(fd, &unix.SockaddrUnix{Name: path})
}

// exitSevenProgram is a static executable of this machine's architecture (ELF64, 132 bytes)
// that exits 7 at once.
func exitSevenProgram() []byte {
	const base, hdr = 0x400000, 64 + 56
	var machine uint16
	var code []byte
	switch runtime.GOARCH {
	case "amd64":
		machine = 62
		code = []byte{0xbf, 7, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05} // mov edi, 7; mov eax, 60 (exit); syscall
	case "arm64":
		machine = 183
		code = []byte{0xe0, 0x00, 0x80, 0xd2, 0xa8, 0x0b, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4} // mov x0, 7; mov x8, 93 (exit); svc 0
	default:
		return nil
	}
	size := uint64(hdr + len(code))
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2) // ET_EXEC
	b = le.AppendUint16(b, machine)
	b = le.AppendUint32(b, 1)        // EV_CURRENT
	b = le.AppendUint64(b, base+hdr) // entry
	b = le.AppendUint64(b, 64)       // program headers
	b = le.AppendUint64(b, 0)        // no section headers
	b = le.AppendUint32(b, 0)        // flags
	b = le.AppendUint16(b, 64)       // header size
	b = le.AppendUint16(b, 56)       // program header size
	b = le.AppendUint16(b, 1)        // one of them
	b = append(b, 0, 0, 0, 0, 0, 0)  // no sections
	b = le.AppendUint32(b, 1)        // PT_LOAD
	b = le.AppendUint32(b, 5)        // R+X
	b = le.AppendUint64(b, 0)        // from the file's start
	b = le.AppendUint64(b, base)     // vaddr
	b = le.AppendUint64(b, base)     // paddr
	b = le.AppendUint64(b, size)     // filesz
	b = le.AppendUint64(b, size)     // memsz
	b = le.AppendUint64(b, 0x1000)   // align
	return append(b, code...)
}

// startGuest starts helper h in a domain of s with spec and returns the domain, once the
// guest's JSON report is decoded into out.
func startGuest(t *testing.T, s *Supervisor, h string, spec Spec, out any) *Domain {
	t.Helper()
	d, report := startJSONHelper(t, s, h, spec, 30*time.Second)
	report(out)
	return d
}

// enterContained is a guest's start: the faults the test planted, EnterWorker, Contain.
func enterContained() {
	plantFaults()
	enter()
	if err := Contain(Policy{}); err != nil {
		fmt.Fprintln(os.Stderr, "Contain:", err)
		os.Exit(ExitRefused)
	}
}

// guestTempDir is a temp dir for a domain as the sidecar makes one: a directory of its own in
// a 0711 directory of the sidecar's, both under t.TempDir().
func guestTempDir(t *testing.T) (sidecarDir, tempDir string) {
	t.Helper()
	sidecarDir = filepath.Join(guestReachable(t), "sidecar")
	tempDir = filepath.Join(sidecarDir, "w")
	if err := os.MkdirAll(tempDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sidecarDir, 0o711); err != nil {
		t.Fatal(err)
	}
	return sidecarDir, tempDir
}

// TestTempDirNoExec: a static program a contained worker writes into its temp dir does not run
// (EACCES), held by two layers, each alone: the tmpfs's noexec (Landlock planted to allow
// execution there) and Landlock (the mount planted without noexec); with both taken away the
// program runs and exits 7, so the test sees an exec that passes. A program written into a
// memfd (on no mount of the domain's, out of Landlock's reach) does not run either: an unsealed
// memfd cannot be made (EPERM, seccomp), a sealed one cannot be executed (EACCES); with the
// seccomp rule taken away it runs. The temp dir is also nosuid
// and nodev, and refuses a FIFO and a device node (EACCES from Landlock; mknod of a device
// would need a capability the worker does not have either); a socket may be made there.
func TestTempDirNoExec(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	if exitSevenProgram() == nil {
		testenv.Unavailable(t, "no test program for "+runtime.GOARCH)
	}
	bothWays(t, "", func(t *testing.T, here bool) {
		s := newContained(t, ModeAuto, here)
		for _, c := range []struct {
			fault     string
			exec      string
			exitCode  int
			memfdExec string
			memfdExit int
		}{
			{"", "EACCES", -1, "EPERM", -1},
			{"landlock-exec", "EACCES", -1, "EPERM", -1},
			{"mount-exec", "EACCES", -1, "EPERM", -1},
			{"mount-exec,landlock-exec", "", 7, "EPERM", -1},
			{"seccomp-memfd", "EACCES", -1, "", 7},
		} {
			_, tmp := guestTempDir(t)
			var g tempGuest
			d := startGuest(t, s, "tempdir-guest", Spec{TempDir: tmp, Env: []string{faultEnv + "=" + c.fault}}, &g)
			if g.Attempts["exec"] != c.exec || g.ExitCode != c.exitCode {
				t.Errorf("fault %q: exec %q, exit code %d; want %q, %d", c.fault, g.Attempts["exec"], g.ExitCode, c.exec, c.exitCode)
			}
			if g.Attempts["memfd exec"] != c.memfdExec || g.MemfdExit != c.memfdExit || g.Attempts["sealed memfd exec"] != "EACCES" {
				t.Errorf("fault %q: memfd exec %q, exit code %d, sealed memfd exec %q; want %q, %d, EACCES", c.fault,
					g.Attempts["memfd exec"], g.MemfdExit, g.Attempts["sealed memfd exec"], c.memfdExec, c.memfdExit)
			}
			if c.fault == "" {
				const want = unix.ST_NOEXEC | unix.ST_NOSUID | unix.ST_NODEV
				if g.Flags&want != want || g.Flags&unix.ST_RDONLY != 0 {
					t.Errorf("temp dir mount flags %#x, want noexec, nosuid, nodev, read-write", g.Flags)
				}
				for name, want := range map[string]string{"mkfifo": "EACCES", "mknod": "EACCES", "socket": "", "statfs": ""} {
					if got := g.Attempts[name]; got != want {
						t.Errorf("%s: %q, want %q", name, got, want)
					}
				}
				if g.Wd != tmp || g.TmpDir != tmp {
					t.Errorf("working directory %q, TMPDIR %q; want both %s", g.Wd, g.TmpDir, tmp)
				}
			}
			o, err := d.Kill(context.Background())
			assertReaped(t, o, err, "kill")
		}
	})
}

// TestTempDirBounded: a contained worker's temp dir is a tmpfs of Spec.TempDirBytes (by
// default half the domain's memory limit): writing past it fails with ENOSPC, the domain
// lives on (not OOM-killed) and may write again once it removed the file, and nothing of it
// reached the host's disk. The containment report gives the default size. A temp dir larger
// than the memory limit is bounded by the memory limit: an OOM kill.
func TestTempDirBounded(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	s := newContained(t, ModeAuto, true)
	rep := s.Report().Containment
	if rep.TempDirBytes != DefaultMemoryLimit/2 {
		t.Errorf("report: temp dir %d bytes, want %d", rep.TempDirBytes, DefaultMemoryLimit/2)
	}
	for _, l := range rep.Layers {
		if l.Name == "temp dir" && (!l.Enforced || !strings.Contains(l.Detail, strconv.Itoa(DefaultMemoryLimit/2))) {
			t.Errorf("report: %+v", l)
		}
	}
	for _, c := range []struct {
		name        string
		spec        Spec
		size, write int64
	}{
		{"TempDirBytes 32 MiB", Spec{TempDirBytes: 32 << 20}, 32 << 20, 48 << 20},
		{"default, memory 128 MiB", Spec{MemoryLimit: 128 << 20}, 64 << 20, 96 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, tmp := guestTempDir(t)
			spec := c.spec
			spec.TempDir, spec.Env = tmp, []string{"STEWARD_TEST_FILL=" + strconv.FormatInt(c.write, 10)}
			var g tempGuest
			d := startGuest(t, s, "tempdir-guest", spec, &g)
			if g.Size != c.size {
				t.Errorf("temp dir of %d bytes, want %d", g.Size, c.size)
			}
			// The fill stops short of the size: the program and the socket took a page each.
			if g.Attempts["fill"] != "ENOSPC" || g.Filled > c.size || g.Filled < c.size-(1<<20) {
				t.Errorf("fill: %d bytes written, then %q; want ENOSPC within 1 MiB of %d", g.Filled, g.Attempts["fill"], c.size)
			}
			if g.Attempts["write after removing"] != "" {
				t.Errorf("write after removing the fill: %q", g.Attempts["write after removing"])
			}
			if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
				t.Errorf("the host's temp dir holds %v (%v): the guest's files reached it", ents, err)
			}
			select {
			case <-d.Done():
				t.Fatal("the domain ended after its temp dir filled up")
			default:
			}
			o, err := d.Kill(context.Background())
			assertReaped(t, o, err, "kill")
			if o.OOMKilled {
				t.Errorf("the domain was OOM-killed: %+v", o)
			}
		})
	}
	// Why the default is below the memory limit: the tmpfs's pages are charged to the domain,
	// and a temp dir larger than its memory limit fills the memory first (no swap): the
	// domain is OOM-killed instead of seeing ENOSPC.
	t.Run("TempDirBytes above the memory limit", func(t *testing.T) {
		_, tmp := guestTempDir(t)
		d, _ := startJSONHelper(t, s, "tempdir-guest", Spec{TempDir: tmp, TempDirBytes: 256 << 20, MemoryLimit: 128 << 20,
			Env: []string{"STEWARD_TEST_FILL=" + strconv.Itoa(200<<20)}}, 30*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		o, err := d.Wait(ctx)
		if err != nil || !o.OOMKilled || o.SignalName != "SIGKILL" {
			t.Errorf("outcome %+v, %v; want OOM-killed", o, err)
		}
		if o, err := d.Kill(context.Background()); err != nil || !o.AllReaped || o.Survivors != 0 {
			t.Errorf("after the OOM kill: %+v, %v; want all reaped", o, err)
		}
	})
}

// socketsGuest is what a contained guest got from connect(2) to each socket path ("" when it
// connected), and its working directory.
type socketsGuest struct {
	Wd       string
	Connects map[string]string
}

// helperSocketsGuest connects to each path of STEWARD_TEST_SOCKETS (separated by NUL bytes
// would not pass an environment: by newlines), reports on fd 3 and waits to be killed.
func helperSocketsGuest() {
	enterContained()
	g := socketsGuest{Connects: map[string]string{}}
	g.Wd, _ = os.Getwd()
	for _, p := range strings.Split(os.Getenv("STEWARD_TEST_SOCKETS"), "\n") {
		g.Connects[p] = errName(dialUnix(p))
	}
	b, _ := json.Marshal(g)
	_, _ = unix.Write(3, append(b, '\n'))
	sleepForever()
}

// hostSocket listens on a unix socket at path, mode 0777 (its directory made 0755 when the
// test makes it), and counts the connections it accepts; both go at the end of the test.
func hostSocket(t *testing.T, path string, mkdir bool) *atomic.Int64 {
	t.Helper()
	if mkdir {
		if err := os.Mkdir(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(filepath.Dir(path)) })
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return &n
}

// TestHostSocketsUnreachable: a pathname unix socket of the host, mode 0777 in a directory
// anyone may search, cannot be reached from a contained domain wherever it lies outside the
// system's trees — under /tmp, beside the domain's temp dir in the sidecar's directory, under
// /run, /var/tmp, /dev/shm, directly in /dev, in a top-level directory of its own and directly
// in / — and the domain's working directory is its temp dir (an inherited one would reach
// them by relative paths). A socket in a tree the Spec's policy names is reached (the checks
// see a connection), and with the host's /tmp left visible (planted) so are the two below it.
func TestHostSocketsUnreachable(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	bothWays(t, "", func(t *testing.T, here bool) {
		s := newContained(t, ModeAuto, here)
		sidecarDir, tmp := guestTempDir(t)
		tag := fmt.Sprintf("steward-hostsock-%d-%v", os.Getpid(), here)
		shown := filepath.Join(filepath.Dir(sidecarDir), "shown")
		if err := os.Mkdir(shown, 0o755); err != nil {
			t.Fatal(err)
		}
		type place struct {
			path  string
			mkdir bool
			inTmp bool // reached with the host's /tmp visible
		}
		places := []place{
			{filepath.Join("/tmp", tag, "host.sock"), true, true},
			{filepath.Join(sidecarDir, "host.sock"), false, true},
			{filepath.Join("/run", tag, "host.sock"), true, false},
			{filepath.Join("/var/tmp", tag+".sock"), false, false},
			{filepath.Join("/dev/shm", tag+".sock"), false, false},
			{filepath.Join("/dev", tag+".sock"), false, false},
			{filepath.Join("/", tag, "host.sock"), true, false},
			{filepath.Join("/", tag+".sock"), false, false},
		}
		accepted := map[string]*atomic.Int64{}
		var paths []string
		for _, p := range places {
			if _, err := os.Stat(filepath.Dir(p.path)); !p.mkdir && err != nil {
				testenv.Unavailable(t, fmt.Sprintf("%s: %v", filepath.Dir(p.path), err))
			}
			accepted[p.path] = hostSocket(t, p.path, p.mkdir)
			if !p.mkdir {
				t.Cleanup(func() { os.Remove(p.path) })
			}
			paths = append(paths, p.path)
		}
		control := filepath.Join(shown, "host.sock")
		accepted[control] = hostSocket(t, control, false)
		paths = append(paths, control)

		for _, fault := range []string{"", "keep-tmp"} {
			before := map[string]int64{}
			for p, n := range accepted {
				before[p] = n.Load()
			}
			var g socketsGuest
			d := startGuest(t, s, "sockets-guest", Spec{TempDir: tmp, Policy: Policy{Read: []string{shown}},
				Env: []string{faultEnv + "=" + fault, "STEWARD_TEST_SOCKETS=" + strings.Join(paths, "\n")}}, &g)
			if fault == "" && g.Wd != tmp {
				t.Errorf("working directory %q, want the temp dir %s", g.Wd, tmp)
			}
			if got := g.Connects[control]; got != "" {
				t.Errorf("fault %q: the socket in the policy's tree: %q, want a connection", fault, got)
			}
			for _, p := range places {
				reach := fault == "keep-tmp" && p.inTmp
				if got := g.Connects[p.path]; (got == "") != reach {
					t.Errorf("fault %q: connect %s: %q, want connected %v", fault, p.path, got, reach)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for p, n := range accepted {
				want := before[p]
				if g.Connects[p] == "" {
					want++
				}
				for n.Load() != want && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if n.Load() != want {
					t.Errorf("fault %q: %s accepted %d connections, want %d", fault, p, n.Load()-before[p], want-before[p])
				}
			}
			o, err := d.Kill(context.Background())
			assertReaped(t, o, err, "kill")
		}
	})
}
