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
	// systemd 252 knows no DelegateSubgroup=: the unit's processes start in its own cgroup, and
	// the ExecStartPre doctor, alone there, moves itself into <unit>/supervisor and enables
	// memory and pids in the unit's cgroup, where systemd then cannot start ExecStart
	// (status=219/CGROUP). The doctor runs in a delegated transient unit of its own instead.
	exampledbDropIn = `[Service]
ExecStartPre=
`
	// unitScript prints the console protocol's markers around three steps: systemd's version,
	// steward doctor as the service user in a delegated transient unit, and exampledb.service.
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
systemctl start dbus.service # systemd-run talks to systemd over D-Bus
name=doctor; step doctor systemd-run --quiet --wait --pipe --uid=exampledb --gid=exampledb -p Delegate=yes -p StateDirectory=steward-doctor \
  /usr/local/bin/steward doctor --cgroup-parent auto --state-dir /var/lib/steward-doctor
unit() {
  systemctl start exampledb.service || return 1
  while s=$(systemctl is-active exampledb.service); [ "$s" = active ] || [ "$s" = activating ]; do sleep 1; done
  systemctl show -p Result -p ExecMainStatus -p NRestarts exampledb.service
  journalctl -u exampledb.service --no-pager -o cat
  [ "$(systemctl show -P Result exampledb.service)" = success ]
}
name=unit; step unit unit
echo "v2vm: done"
`
)

// TestShippedUnitUnderSystemd boots the 6.12 VM with the host's root and the host's systemd as
// PID 1 (systemd --unit=v2vm.target), and starts deploy/systemd/exampledb.service there as
// shipped (User=exampledb, Delegate=memory pids, StateDirectory, LoadCredential of the sidecar's
// S3 keys, ProtectSystem=strict, PrivateTmp, ExecStart with --cgroup-parent auto), with one
// drop-in for the host's systemd 252 (exampledbDropIn): its database (TestAsExampleDB) runs one
// mutation through the steward it starts. steward doctor runs as the service user in a
// delegated transient unit (systemd-run -p Delegate=yes) and must say ready on v2.
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
		{Path: "/v2vm/etc/systemd/system/exampledb.service.d/v2vm.conf", Mode: 0o644, Data: []byte(exampledbDropIn)},
	}
	r := boot(t, tools, dir, files, nil, Options{HostRoot: true, Timeout: 5 * time.Minute,
		Init: []string{"/lib/systemd/systemd", "--unit=v2vm.target"}}, time.Since(t0))
	for _, name := range []string{"systemd", "doctor", "unit"} {
		s := step(t, r, name)
		t.Logf("%s:\n%s", name, strings.Join(s.Lines, "\n"))
		if s.Exit != 0 {
			t.Errorf("%s: exit %d", name, s.Exit)
		}
	}
	if out := strings.Join(step(t, r, "doctor").Lines, "\n"); !strings.Contains(out, "verdict: ready (isolation v2)") {
		t.Errorf("doctor in a delegated transient unit: want the verdict ready on v2")
	}
	if v := verdicts(step(t, r, "unit").Lines)["TestAsExampleDB"]; !strings.HasPrefix(v, "PASS") {
		t.Errorf("exampledb.service: TestAsExampleDB %q", v)
	}
}
