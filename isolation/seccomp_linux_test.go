package isolation

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testenv"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// TestSeccompProgram runs the contained worker's filter in a BPF interpreter over made-up
// system calls: socket families (whole-register comparison), socketpair, a refused call, any
// call through a foreign ABI (i386's, int 0x80 on amd64), which the policy's own program would
// allow, and memfd_create's flags (only a memfd sealed against execution may be made).
func TestSeccompProgram(t *testing.T) {
	prog, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, in := range prog {
		raw[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	insts, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("filter does not disassemble")
	}
	vm, err := bpf.NewVM(insts)
	if err != nil {
		t.Fatal(err)
	}
	native, _ := arch.GetInfo("")
	nr := func(name string) uint32 { return uint32(native.SyscallNames[name]) }
	const auditArchI386 = 0x40000003
	allow, eperm := uint32(unix.SECCOMP_RET_ALLOW), uint32(unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	eafnosupport, enosys := uint32(errnoAction(unix.EAFNOSUPPORT)), uint32(errnoAction(unix.ENOSYS))
	for _, c := range []struct {
		name string
		arch uint32
		nr   uint32
		arg0 uint64
		want uint32
	}{
		{"socket unix", uint32(native.ID), nr("socket"), unix.AF_UNIX, allow},
		{"socket inet", uint32(native.ID), nr("socket"), unix.AF_INET, allow},
		{"socket inet6", uint32(native.ID), nr("socket"), unix.AF_INET6, allow},
		{"socket netlink", uint32(native.ID), nr("socket"), unix.AF_NETLINK, allow},
		{"socket vsock", uint32(native.ID), nr("socket"), unix.AF_VSOCK, eafnosupport},
		{"socket packet", uint32(native.ID), nr("socket"), unix.AF_PACKET, eafnosupport},
		{"socket inet, high bits", uint32(native.ID), nr("socket"), 1<<32 | unix.AF_INET, eafnosupport},
		{"socketpair unix", uint32(native.ID), nr("socketpair"), unix.AF_UNIX, allow},
		{"socketpair inet", uint32(native.ID), nr("socketpair"), unix.AF_INET, eafnosupport},
		{"ptrace", uint32(native.ID), nr("ptrace"), 0, eperm},
		{"getpid", uint32(native.ID), nr("getpid"), 0, allow},
		{"i386 socketcall", auditArchI386, 102, 1, enosys},
		{"i386 getpid", auditArchI386, 20, 0, enosys},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := vm.Run(seccompData(c.nr, c.arch, c.arg0))
			if err != nil || uint32(got) != c.want {
				t.Errorf("filter returns %#x, %v; want %#x", uint32(got), err, c.want)
			}
		})
	}
	for _, c := range []struct {
		name  string
		flags uint64
		want  uint32
	}{
		{"memfd_create", 0, eperm},
		{"memfd_create cloexec", unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING, eperm},
		{"memfd_create exec", unix.MFD_EXEC, eperm},
		{"memfd_create noexec seal", unix.MFD_CLOEXEC | unix.MFD_NOEXEC_SEAL, allow},
		{"memfd_create noexec seal, high bits", 1<<32 | unix.MFD_NOEXEC_SEAL, allow},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := vm.Run(seccompData(nr("memfd_create"), uint32(native.ID), 0, c.flags))
			if err != nil || uint32(got) != c.want {
				t.Errorf("filter returns %#x, %v; want %#x", uint32(got), err, c.want)
			}
		})
	}
}

// seccompData is a struct seccomp_data for the BPF interpreter, which loads words big-endian
// where the kernel loads them in the machine's order: each 32-bit word is written big-endian
// at the offset where the kernel has it (a little-endian machine: an argument's low word first).
func seccompData(nr, arch uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

func init() {
	helpers["exec-after-contain"] = func() {
		enter()
		path := os.Getenv("STEWARD_TEST_EXEC")
		if err := Contain(Policy{}); err != nil { // the program's dir came with the Spec
			fmt.Fprintln(os.Stderr, "Contain:", err)
			os.Exit(ExitRefused)
		}
		err := syscall.Exec(path, []string{path}, nil)
		fmt.Fprintln(os.Stderr, "exec:", err)
		os.Exit(execFailed)
	}
}

// execFailed is the exit code of helper exec-after-contain when its exec fails.
const execFailed = 7

// i386VsockProgram is a static i386 executable (ELF32, 130 bytes) that calls socket(AF_VSOCK,
// SOCK_STREAM, 0) through int 0x80 and then exits with the negated result (an fd n: 256-n; an
// error: its errno) — or, when the call returned -ENOSYS, executes ud2 (SIGILL) at once, since
// its exit would be refused the same way.
func i386VsockProgram() []byte {
	const base, hdr = 0x08048000, 52 + 32
	code := []byte{
		0xb8, 0x67, 0x01, 0, 0, // mov eax, 359 (socket)
		0xbb, 0x28, 0, 0, 0, // mov ebx, 40 (AF_VSOCK)
		0xb9, 0x01, 0, 0, 0, // mov ecx, 1 (SOCK_STREAM)
		0x31, 0xd2, // xor edx, edx
		0xcd, 0x80, // int 0x80
		0x83, 0xf8, 0xda, // cmp eax, -38 (ENOSYS)
		0x75, 0x02, // jne exit
		0x0f, 0x0b, // ud2
		0x89, 0xc3, // exit: mov ebx, eax
		0xf7, 0xdb, // neg ebx
		0xb8, 0x01, 0, 0, 0, // mov eax, 1 (exit)
		0xcd, 0x80, // int 0x80
		0x0f, 0x0b, // ud2
	}
	size := uint32(hdr + len(code))
	b := []byte{0x7f, 'E', 'L', 'F', 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	le := binary.LittleEndian
	b = le.AppendUint16(b, 2)        // ET_EXEC
	b = le.AppendUint16(b, 3)        // EM_386
	b = le.AppendUint32(b, 1)        // EV_CURRENT
	b = le.AppendUint32(b, base+hdr) // entry
	b = le.AppendUint32(b, 52)       // program headers
	b = le.AppendUint32(b, 0)        // no section headers
	b = le.AppendUint32(b, 0)        // flags
	b = le.AppendUint16(b, 52)       // header size
	b = le.AppendUint16(b, 32)       // program header size
	b = le.AppendUint16(b, 1)        // one of them
	b = append(b, 0, 0, 0, 0, 0, 0)  // no sections
	b = le.AppendUint32(b, 1)        // PT_LOAD
	b = le.AppendUint32(b, 0)        // from the file's start
	b = le.AppendUint32(b, base)     // vaddr
	b = le.AppendUint32(b, base)     // paddr
	b = le.AppendUint32(b, size)     // filesz
	b = le.AppendUint32(b, size)     // memsz
	b = le.AppendUint32(b, 5)        // R+X
	b = le.AppendUint32(b, 0x1000)   // align
	return append(b, code...)
}

// TestForeignABIRefused: a contained worker that execs an i386 program finds every system call
// through int 0x80 refused (ENOSYS), socket(AF_VSOCK) included; the policy's own filter let
// that ABI through untouched, so the program created its socket and exited 253.
func TestForeignABIRefused(t *testing.T) {
	needCgroups(t)
	testenv.NeedRoot(t)
	if runtime.GOARCH != "amd64" {
		testenv.Unavailable(t, "the i386 ABI is an amd64 kernel's")
	}
	s := newContained(t, ModeAuto, true)
	dir := guestReachable(t)
	path := dir + "/vsock32"
	if err := os.WriteFile(path, i386VsockProgram(), 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	d, err := s.Start(context.Background(), Spec{Env: workerEnv("exec-after-contain", "STEWARD_TEST_EXEC="+path), Stderr: &lockedBuilder{b: &stderr},
		Policy: Policy{Read: []string{dir}}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	o, err := d.Wait(ctx)
	switch {
	case err != nil:
		t.Fatal(err)
	case o.ExitCode == execFailed && strings.Contains(stderr.String(), "exec format error"):
		testenv.Unavailable(t, "this kernel runs no i386 program (IA32 emulation off)")
	case o.SignalName != "SIGILL":
		t.Fatalf("outcome %+v (stderr %q), want SIGILL: the i386 socket call was not refused with ENOSYS", o, stderr.String())
	}
}
