#!/usr/bin/env bash
# scripts/minio.sh — install (once, cached) and run a throwaway MinIO for steward's tests.
#
#   scripts/minio.sh install          build MinIO into .tools/ if missing (~4 min the first time)
#   scripts/minio.sh start DIR        start on a free 127.0.0.1 port, data + env file under DIR
#   scripts/minio.sh stop DIR         stop the server started with DIR
#
# MinIO is AGPL-3.0: we run it as a separate test server and never import it.
# `start` writes DIR/env with STEWARD_S3_ENDPOINT, STEWARD_S3_ACCESS_KEY, STEWARD_S3_SECRET_KEY,
# which the Go test helper (internal/testing/testminio) reads. Credentials are random per start.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${STEWARD_TOOLS:-$ROOT/.tools}"
MINIO_VERSION="v0.0.0-20260212201848-7aac2a2c5b7c"
BIN="$TOOLS/minio"

install() {
  if [[ -x "$BIN" && -f "$TOOLS/minio.version" && "$(cat "$TOOLS/minio.version")" == "$MINIO_VERSION" ]]; then
    return 0
  fi
  mkdir -p "$TOOLS"
  echo "scripts/minio.sh: building MinIO $MINIO_VERSION into $TOOLS (once, ~4 minutes)" >&2
  GOBIN="$TOOLS" GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION"
  echo "$MINIO_VERSION" > "$TOOLS/minio.version"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

start() {
  local dir="$1"
  install
  mkdir -p "$dir/data"
  local port console access secret
  port="$(free_port)"; console="$(free_port)"
  access="steward$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  secret="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  MINIO_ROOT_USER="$access" MINIO_ROOT_PASSWORD="$secret" MINIO_BROWSER=off \
    MINIO_UPDATE=off \
    nohup "$BIN" server --quiet --address "127.0.0.1:$port" --console-address "127.0.0.1:$console" \
      "$dir/data" >"$dir/minio.log" 2>&1 &
  echo $! > "$dir/minio.pid"
  for _ in $(seq 1 300); do
    if curl -fsS "http://127.0.0.1:$port/minio/health/ready" >/dev/null 2>&1; then
      umask 077
      cat > "$dir/env" <<ENV
STEWARD_S3_ENDPOINT=127.0.0.1:$port
STEWARD_S3_ACCESS_KEY=$access
STEWARD_S3_SECRET_KEY=$secret
ENV
      echo "127.0.0.1:$port"
      return 0
    fi
    if ! kill -0 "$(cat "$dir/minio.pid")" 2>/dev/null; then
      echo "scripts/minio.sh: MinIO exited; log:" >&2; cat "$dir/minio.log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "scripts/minio.sh: MinIO not healthy after 30 s" >&2
  return 1
}

stop() {
  local dir="$1"
  [[ -f "$dir/minio.pid" ]] || return 0
  local pid; pid="$(cat "$dir/minio.pid")"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/minio.pid"
}

case "${1:-}" in
  install) install ;;
  start) start "${2:?usage: minio.sh start DIR}" ;;
  stop) stop "${2:?usage: minio.sh stop DIR}" ;;
  *) echo "usage: $0 install|start DIR|stop DIR" >&2; exit 2 ;;
esac
