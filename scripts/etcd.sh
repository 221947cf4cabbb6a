#!/usr/bin/env bash
# scripts/etcd.sh — install (once, cached) the etcd server steward's tests run as a real cluster.
#
#   scripts/etcd.sh install     build etcd and etcdctl into .tools/ if missing (~2 min the first time)
#   scripts/etcd.sh version     print the pinned version
#
# etcd is built from the Go module proxy at a pinned version (like scripts/minio.sh for MinIO);
# the Go test helper internal/testing/testetcd starts 3-member clusters from the cached binary, so this
# script never starts a server itself. Use $STEWARD_TOOLS to share one tools dir between clones.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${STEWARD_TOOLS:-$ROOT/.tools}"
# Keep in step with go.etcd.io/etcd/client/v3 in go.mod.
ETCD_VERSION="v3.7.3"

install() {
  if [[ -x "$TOOLS/etcd" && -x "$TOOLS/etcdctl" && -f "$TOOLS/etcd.version" \
        && "$(cat "$TOOLS/etcd.version")" == "$ETCD_VERSION" ]]; then
    return 0
  fi
  mkdir -p "$TOOLS"
  echo "scripts/etcd.sh: building etcd $ETCD_VERSION into $TOOLS (once, ~3 minutes)" >&2
  # The server and etcdctl modules carry replace directives (for etcd's own monorepo), so
  # `go install module@version` refuses them. A throwaway module that requires both at the pinned
  # version builds them instead: the replaces are ignored, every dependency resolves to the
  # version those modules require, and the result is the same on every machine.
  local tmp; tmp="$(mktemp -d)"
  trap "rm -rf '$tmp'" RETURN
  (
    cd "$tmp"
    go mod init steward-etcd-build >/dev/null 2>&1
    GOFLAGS=-mod=mod go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "go.etcd.io/etcd/etcdctl/v3@$ETCD_VERSION"
    GOFLAGS=-mod=mod go build -trimpath -o "$tmp/etcd" go.etcd.io/etcd/server/v3
    GOFLAGS=-mod=mod go build -trimpath -o "$tmp/etcdctl" go.etcd.io/etcd/etcdctl/v3
  )
  mv "$tmp/etcd" "$TOOLS/etcd"
  mv "$tmp/etcdctl" "$TOOLS/etcdctl"
  echo "$ETCD_VERSION" > "$TOOLS/etcd.version"
}

case "${1:-}" in
  install) install ;;
  version) echo "$ETCD_VERSION" ;;
  *) echo "usage: $0 install|version" >&2; exit 2 ;;
esac
