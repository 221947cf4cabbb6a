#!/usr/bin/env bash
# scripts/v2vm.sh — install (once, cached) what the pure cgroup v2 VM tests boot: QEMU from
# Debian and two Debian kernels that mount cgroup2 alone (cgroup_no_v1=all): 6.1 cloud (the v2
# tests on the built-in engine, Landlock ABI 2) and 6.12 generic (the Lance engine over the host's
# root shared with virtio-9p, Landlock ABI 6; its 9p and overlay modules are kept beside it).
#
#   scripts/v2vm.sh install     QEMU (apt, pinned) and the kernel into .tools/v2vm/ if missing
#   scripts/v2vm.sh version     print the pinned versions
#
# This machine's cgroups are hybrid; production runs pure v2. internal/testing/v2vm boots the kernel under
# QEMU (TCG: this host's /dev/kvm is PVM-based and does not boot a stock kernel) with an initramfs
# it builds from the isolation tests, and reads their results off the serial console.
# The kernel is fetched with `apt-get download` and unpacked with `dpkg-deb -x`, never installed:
# `apt-get install` of a kernel pulls initramfs-tools and upgrades the host's systemd. Its .deb's
# sha256 is pinned here. QEMU is installed with apt (it needs root) at its exact Debian version.
# Use $STEWARD_TOOLS to share one tools dir between clones.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${STEWARD_TOOLS:-$ROOT/.tools}"
DIR="$TOOLS/v2vm"
QEMU_VERSION="1:7.2+dfsg-7+deb12u18+b3"
KERNEL_PKG="linux-image-6.1.0-57-cloud-amd64"
KERNEL_VERSION="6.1.192-3"
KERNEL_SHA256="4fdd0172a8c3f41a97e92465b2ac1867e1c10d82d7aeed3d26ee7a5d14df1754"
KERNEL_RELEASE="${KERNEL_PKG#linux-image-}"
# The generic 6.12 kernel (bookworm-security): 9p and overlayfs are modules, loaded by the guest's init.
K612_PKG="linux-image-6.12.118+deb12-amd64"
K612_VERSION="6.12.118-1~deb12u1"
K612_SHA256="8e837371953d0d8e1e9e998a340340dcbd7a13619d529a16773a56870d69bd13"
K612_RELEASE="${K612_PKG#linux-image-}"
K612_DIR="$DIR/6.12"
# The modules the guest needs (their dependencies are added from each module's modinfo).
K612_MODULES=(9p 9pnet_virtio overlay)
STAMP="qemu-system-x86=$QEMU_VERSION $KERNEL_PKG=$KERNEL_VERSION $K612_PKG=$K612_VERSION"

installed_qemu() {
  [[ "$(dpkg-query -W -f '${Version}' qemu-system-x86 2>/dev/null || true)" == "$QEMU_VERSION" ]] \
    && command -v qemu-system-x86_64 >/dev/null
}

# apt_has PKG VERSION: the package lists offer that exact version.
apt_has() {
  apt-cache madison "$1" 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$2"
}

# need_lists PKG VERSION: refresh the package lists once if they do not offer the pin.
need_lists() {
  apt_has "$1" "$2" && return 0
  echo "scripts/v2vm.sh: apt lists lack $1=$2: apt-get update" >&2
  apt-get update -qq >&2
  apt_has "$1" "$2" || { echo "scripts/v2vm.sh: $1=$2 is not offered by this machine's apt sources" >&2; return 1; }
}

install_qemu() {
  installed_qemu && return 0
  if [[ "$(id -u)" != 0 ]]; then
    echo "scripts/v2vm.sh: qemu-system-x86=$QEMU_VERSION is not installed and installing it needs root" >&2
    return 1
  fi
  need_lists qemu-system-x86 "$QEMU_VERSION"
  echo "scripts/v2vm.sh: apt-get install qemu-system-x86=$QEMU_VERSION (once, ~20 s)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades \
    "qemu-system-x86=$QEMU_VERSION" "qemu-system-common=$QEMU_VERSION" >&2
  installed_qemu
}

install_kernel() {
  if [[ -f "$DIR/vmlinuz" && -f "$DIR/kernel.version" && "$(cat "$DIR/kernel.version")" == "$KERNEL_PKG=$KERNEL_VERSION" ]]; then
    return 0
  fi
  need_lists "$KERNEL_PKG" "$KERNEL_VERSION"
  local tmp; tmp="$(mktemp -d)"
  trap "rm -rf '$tmp'" RETURN
  chmod 755 "$tmp" # apt's _apt user writes the download there
  echo "scripts/v2vm.sh: apt-get download $KERNEL_PKG=$KERNEL_VERSION (once, ~27 MB)" >&2
  (cd "$tmp" && apt-get download -qq "$KERNEL_PKG=$KERNEL_VERSION" >&2)
  local deb; deb="$(ls "$tmp"/*.deb)"
  echo "$KERNEL_SHA256  $deb" | sha256sum --quiet -c - || {
    echo "scripts/v2vm.sh: $deb does not have the pinned sha256 $KERNEL_SHA256" >&2; return 1; }
  dpkg-deb -x "$deb" "$tmp/x"
  mkdir -p "$DIR"
  cp "$tmp/x/boot/vmlinuz-$KERNEL_RELEASE" "$DIR/vmlinuz"
  echo "$KERNEL_PKG=$KERNEL_VERSION" > "$DIR/kernel.version"
}

# fetch_deb PKG VERSION SHA256 DIR: download PKG=VERSION, check its sha256, unpack it into DIR.
fetch_deb() {
  need_lists "$1" "$2"
  local tmp; tmp="$(mktemp -d)"
  chmod 755 "$tmp" # apt's _apt user writes the download there
  echo "scripts/v2vm.sh: apt-get download $1=$2 (once)" >&2
  (cd "$tmp" && apt-get download -qq "$1=$2" >&2) || { rm -rf "$tmp"; return 1; }
  local deb; deb="$(ls "$tmp"/*.deb)"
  echo "$3  $deb" | sha256sum --quiet -c - || {
    echo "scripts/v2vm.sh: $deb does not have the pinned sha256 $3" >&2; rm -rf "$tmp"; return 1; }
  dpkg-deb -x "$deb" "$4"
  rm -f "$deb"
  rmdir "$tmp"
}

# modinfo_depends KO: the modules KO depends on (its .modinfo's depends=, comma-separated).
modinfo_depends() {
  local cat=cat
  [[ "$1" == *.xz ]] && cat="xz -dc"
  $cat "$1" | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',' ' '
}

install_kernel612() {
  if [[ -f "$K612_DIR/vmlinuz" && -f "$K612_DIR/modules.load" && -f "$K612_DIR/kernel.version" \
        && "$(cat "$K612_DIR/kernel.version")" == "$K612_PKG=$K612_VERSION" ]]; then
    return 0
  fi
  local x; x="$(mktemp -d)"
  trap "rm -rf '$x'" RETURN
  fetch_deb "$K612_PKG" "$K612_VERSION" "$K612_SHA256" "$x"
  local mods="$x/lib/modules/$K612_RELEASE/kernel" new="$K612_DIR.new"
  rm -rf "$new"
  mkdir -p "$new/modules"
  cp "$x/boot/vmlinuz-$K612_RELEASE" "$new/vmlinuz"
  # Dependencies first (a depth-first walk of each module's depends=), each module once.
  local -A seen=()
  local order=()
  add() {
    [[ -n "${seen[$1]:-}" ]] && return 0
    seen[$1]=1
    local ko; ko="$(find "$mods" -name "$1.ko*" | head -n1)"
    [[ -n "$ko" ]] || { echo "scripts/v2vm.sh: $K612_PKG has no module $1" >&2; return 1; }
    local d
    for d in $(modinfo_depends "$ko"); do add "$d"; done
    cp "$ko" "$new/modules/"
    order+=("$(basename "$ko")")
  }
  local m
  for m in "${K612_MODULES[@]}"; do add "$m"; done
  printf '%s\n' "${order[@]}" > "$new/modules.load"
  echo "$K612_PKG=$K612_VERSION" > "$new/kernel.version"
  rm -rf "$K612_DIR"
  mv "$new" "$K612_DIR"
}

install() {
  install_qemu
  install_kernel
  install_kernel612
  echo "$STAMP" > "$DIR/versions"
}

case "${1:-}" in
  install) install ;;
  version) echo "$STAMP" ;;
  *) echo "usage: $0 install|version" >&2; exit 2 ;;
esac
