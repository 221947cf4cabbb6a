package v2vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cba1309c/steward/internal/testing/testbin"
	"github.com/cba1309c/steward/internal/testing/testenv"
)

// The guest's units: v2vm.target (systemd --unit) pulls v2vm.service, which runs unitScript on
// the console and powers off.
const (
	v2vmTarget = `[Unit]
Description=steward's v2 VM
Requires=v2vm.service
After=v2vm.service
AllowIsolate=yes
`
	v2vmService = `[Unit]
Description=steward's v2 VM: the steps
DefaultDependencies=no
[Service]
Type=oneshot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStart=/bin/sh /v2vm/run.sh
ExecStartPost=/bin/systemctl poweroff --no-block
`
	// unitScript prints the console protocol's markers around two steps: systemd's version and
	// exampledb.service as shipped, its ExecStartPre doctor included.
	unitScript = `
echo "v2vm: kernel $(uname -r)"
echo "v2vm: controllers $(cat /sys/fs/cgroup/cgroup.controllers)"
step() { echo "v2vm: begin $1"; t0=$(date +%s%3N); shift; "$@"; rc=$?; echo "v2vm: end $name exit $rc ms $(( $(date +%s%3N) - t0 ))"; }
name=systemd; step systemd systemctl --version
useradd --system --home /var/lib/exampledb exampledb
install -m 0755 /v2/steward /usr/local/bin/steward
printf '#!/bin/sh\nexec /v2/v2vm.test -test.v -test.count=1 -test.run "^TestAsExampleDB$" -- "$@"\n' > /usr/local/bin/exampledb
chmod 0755 /usr/local/bin/exampledb
mkdir -p /etc/exampledb
printf 'access_key = AKIAV2VMEXAMPLE\nsecret_key = v2vm-example-secret-not-a-real-one\n' > /etc/exampledb/steward-s3
chmod 0400 /etc/exampledb/steward-s3
systemctl daemon-reload
# Bounded, so that a unit that never settles (Restart=on-failure after a failing ExecStart) still
# shows its state, cgroups and journal on the console.
unit() {
  timeout 100 systemctl start exampledb.service; rc=$?
  i=0; while s=$(systemctl is-active exampledb.service); [ $i -lt 120 ] && { [ "$s" = active ] || [ "$s" = activating ]; }; do sleep 1; i=$((i+1)); done
  systemctl show -p ActiveState -p SubState -p Result -p ExecMainStatus -p NRestarts exampledb.service
  cg=/sys/fs/cgroup/system.slice/exampledb.service
  for d in $(find $cg -type d 2>/dev/null); do echo "cgroup $d: procs [$(cat $d/cgroup.procs | tr '\n' ' ')] subtree_control [$(cat $d/cgroup.subtree_control)]"; done
  journalctl -u exampledb.service --no-pager -o cat
  [ $rc = 0 ] && [ "$(systemctl show -P Result exampledb.service)" = success ]
}
name=unit; step unit unit
echo "v2vm: done"
`
)

// TestShippedUnitUnderSystemd boots the 6.12 VM with the host's root and the host's systemd as
// PID 1 (systemd --unit=v2vm.target), and starts deploy/systemd/exampledb.service there as
// shipped, without a drop-in (User=exampledb, Delegate=memory pids, StateDirectory,
// LoadCredential of the sidecar's S3 keys, ProtectSystem=strict, PrivateTmp, ExecStartPre
// steward doctor and ExecStart with --cgroup-parent auto). systemd 252 knows no
// DelegateSubgroup=, so the doctor runs alone in the unit's own cgroup: it must say ready on v2
// and leave that cgroup as found (moved back, memory and pids disabled again, the leaf removed),
// so that systemd can start ExecStart there; the unit must start without a restart and its
// database (TestAsExampleDB) commit one mutation through the steward it starts.
func TestShippedUnitUnderSystemd(t *testing.T) {
	tools, err := FindTools612()
	if err != nil {
		testenv.Unavailable(t, err.Error())
	}
	if _, err := os.Stat("/lib/systemd/systemd"); err != nil {
		testenv.Unavailable(t, "the host has no systemd to boot the guest with: "+err.Error())
	}
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	t0 := time.Now()
	build(t, "build", "-o", filepath.Join(dir, "init"), "./internal/testing/v2vm/guestinit")
	build(t, "test", "-c", "-tags=v2guest", "-o", filepath.Join(dir, "v2vm.test"), "./internal/testing/v2vm")
	files := []File{
		{Path: "/v2/steward", Mode: 0o755, Src: testbin.Steward(t)},
		{Path: "/v2/v2vm.test", Mode: 0o755, Src: filepath.Join(dir, "v2vm.test")},
		{Path: "/v2vm/run.sh", Mode: 0o644, Data: []byte(unitScript)},
		{Path: "/v2vm/etc/systemd/system/v2vm.target", Mode: 0o644, Data: []byte(v2vmTarget)},
		{Path: "/v2vm/etc/systemd/system/v2vm.service", Mode: 0o644, Data: []byte(v2vmService)},
		{Path: "/v2vm/etc/systemd/system/exampledb.service", Mode: 0o644, Src: filepath.Join(root, "deploy", "systemd", "exampledb.service")},
	}
	r := boot(t, tools, dir, files, nil, Options{HostRoot: true, Timeout: 8 * time.Minute,
		Init: []string{"/lib/systemd/systemd", "--unit=v2vm.target"}}, time.Since(t0))
	for _, name := range []string{"systemd", "unit"} {
		s := step(t, r, name)
		t.Logf("%s:\n%s", name, strings.Join(s.Lines, "\n"))
		if s.Exit != 0 {
			t.Errorf("%s: exit %d", name, s.Exit)
		}
	}
	unit := step(t, r, "unit").Lines
	out := strings.Join(unit, "\n")
	const cg = "/sys/fs/cgroup/system.slice/exampledb.service"
	for _, want := range []string{
		"NRestarts=0",
		"verdict: ready (isolation v2)", // ExecStartPre's doctor
		"moved itself into the leaf /system.slice/exampledb.service/supervisor",
		"disabled memory pids in " + cg + "/cgroup.subtree_control",
		"moved back into unified:/system.slice/exampledb.service",
		"removed " + cg + "/supervisor",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exampledb.service: no %q in its status and journal", want)
		}
	}
	if strings.Contains(out, "219/CGROUP") {
		t.Errorf("exampledb.service: systemd could not place a process in the unit's cgroup")
	}
	if v := verdicts(unit)["TestAsExampleDB"]; !strings.HasPrefix(v, "PASS") {
		t.Errorf("exampledb.service: TestAsExampleDB %q", v)
	}
}
