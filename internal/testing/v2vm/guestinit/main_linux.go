// Command guestinit is PID 1 of the pure cgroup v2 test VM (see package v2vm). It mounts what the
// tests need, runs the steps of /v2vm/plan.json one after the other, prints each step's output
// between marker lines on the console, and powers the VM off. It never decides whether a step
// passed: the host reads the exit codes off the console.
//
// With /v2vm/root.json (the 6.12 kernel's boot), it first loads the kernel modules listed there,
// mounts the host's root (virtio-9p, read-only) under a tmpfs overlay, binds the initramfs's own
// directories into it and makes it the root, so that the steps run the host's programs (python,
// the Lance venv) at their host paths, and everything they write stays in the guest's memory.
//
// Console protocol, one marker a line (the host parses nothing else):
//
//	v2vm: kernel <release>
//	v2vm: controllers <cgroup.controllers of the root>
//	v2vm: begin <step>
//	...the step's stdout and stderr...
//	v2vm: end <step> exit <code> ms <wall milliseconds>
//	v2vm: done
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// step is one command the guest runs; internal/testing/v2vm writes the plan.
type step struct {
	Name   string   // reported in the markers
	Args   []string // argv, Args[0] an absolute path in the initramfs
	Env    []string // the whole environment
	UID    int      // run as this uid and gid (0: root)
	Cgroup string   // cgroup2 directory to start it in ("": the root)
	// Delegate is a cgroup created and handed to UID first, as systemd's Delegate=yes does (the
	// directory and its cgroup.procs, cgroup.subtree_control and cgroup.threads chowned). A
	// Cgroup below it is created and handed over too: DelegateSubgroup='s shape.
	Delegate string
	Timeout  int // seconds (0: 300); the step is SIGKILLed after it
}

func main() {
	err := run()
	if err != nil {
		fmt.Printf("v2vm: error %v\n", err)
	}
	_ = os.Stdout.Sync()
	unix.Sync()
	// PID 1 must not exit: the kernel would panic. Power off instead (qemu -no-reboot exits).
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	select {}
}

func run() error {
	shared, err := hostRoot()
	if err != nil {
		return err
	}
	if err := mountAll(shared); err != nil {
		return err
	}
	var u unix.Utsname
	_ = unix.Uname(&u)
	fmt.Printf("v2vm: kernel %s\n", unix.ByteSliceToString(u.Release[:]))
	ctrl, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		return fmt.Errorf("read cgroup.controllers: %w", err)
	}
	fmt.Printf("v2vm: controllers %s\n", strings.TrimSpace(string(ctrl)))
	// As systemd does on a unified host: the root hands memory and pids to its children.
	if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+memory +pids"), 0); err != nil {
		return fmt.Errorf("enable memory and pids at the root: %w", err)
	}
	b, err := os.ReadFile("/v2vm/plan.json")
	if err != nil {
		return fmt.Errorf("read plan: %w", err)
	}
	var plan []step
	if err := json.Unmarshal(b, &plan); err != nil {
		return fmt.Errorf("decode plan: %w", err)
	}
	for _, s := range plan {
		runStep(s)
	}
	fmt.Println("v2vm: done")
	return nil
}

// mountAll mounts proc, sysfs, devtmpfs, cgroup2 alone (the kernel runs with cgroup_no_v1=all)
// and a world-writable /tmp. On the host's root (shared) /tmp is the host's, written through
// the overlay: a repository or tools dir below it stays visible to the steps.
func mountAll(shared bool) error {
	mounts := []struct{ src, dir, fstype, data string }{
		{"proc", "/proc", "proc", ""},
		{"sysfs", "/sys", "sysfs", ""},
		{"devtmpfs", "/dev", "devtmpfs", ""},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", "nsdelegate"},
	}
	if !shared {
		mounts = append(mounts, struct{ src, dir, fstype, data string }{"tmpfs", "/tmp", "tmpfs", "mode=1777"})
	}
	for _, m := range mounts {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return fmt.Errorf("mkdir %s: %w", m.dir, err)
		}
		if err := unix.Mount(m.src, m.dir, m.fstype, 0, m.data); err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.dir, err)
		}
	}
	return nil
}

// runStep runs s with its output on the console and reports its exit code and wall time.
func runStep(s step) {
	fmt.Printf("v2vm: begin %s\n", s.Name)
	if s.Timeout <= 0 {
		s.Timeout = 300
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.Timeout)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Args[0], s.Args[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = s.Env, os.Stdout, os.Stdout, "/tmp"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if s.UID != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.UID)}
	}
	if s.Delegate != "" {
		err := delegate(s.Delegate, s.UID)
		if err == nil && s.Cgroup != "" && s.Cgroup != s.Delegate {
			err = delegate(s.Cgroup, s.UID)
		}
		if err != nil {
			fmt.Printf("v2vm: %v\n", err)
			fmt.Printf("v2vm: end %s exit %d ms 0\n", s.Name, 125)
			return
		}
	}
	if s.Cgroup != "" {
		fd, err := unix.Open(s.Cgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Printf("v2vm: open cgroup %s: %v\n", s.Cgroup, err)
			fmt.Printf("v2vm: end %s exit %d ms 0\n", s.Name, 125)
			return
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	t0 := time.Now()
	err := cmd.Run()
	code := 0
	if err != nil {
		code = 126
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode() // -1 when killed by a signal (the timeout)
		} else {
			fmt.Printf("v2vm: start %s: %v\n", s.Name, err)
		}
	}
	fmt.Printf("v2vm: end %s exit %d ms %d\n", s.Name, code, time.Since(t0).Milliseconds())
}

// delegate creates dir and chowns it and the files a delegatee writes to uid.
func delegate(dir string, uid int) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("delegate: %w", err)
	}
	for _, p := range []string{dir, dir + "/cgroup.procs", dir + "/cgroup.subtree_control", dir + "/cgroup.threads"} {
		if err := os.Chown(p, uid, uid); err != nil {
			return fmt.Errorf("delegate: %w", err)
		}
	}
	return nil
}
