#!/usr/bin/env bash
# Install everything spoolrender needs on a Debian 12 machine with Python 3.11 and Node 20:
# Debian's Chromium (Remotion must not download its own browser), a virtualenv in .venv
# with spoolrender and its test tools, and the Remotion project's npm packages.
# Idempotent: a second run only checks. Sourced by quickstart.sh and test.sh.
# With --test (test.sh) it also installs the Debian tools the tests use on contrib/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
say() { printf '==> %s\n' "$*" >&2; }

apt_packages=()
[ -x /usr/bin/chromium ] || apt_packages+=(chromium)
python3 -m venv --help >/dev/null 2>&1 || apt_packages+=(python3-venv)
command -v node >/dev/null 2>&1 || apt_packages+=(nodejs npm)
if [ ${#apt_packages[@]} -gt 0 ]; then
  say "installing Debian packages: ${apt_packages[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi

# --test (scripts/test.sh): also the tools tests/e2e/test_contrib.py runs on contrib/. Without
# recommends: Debian's prometheus would pull in node_exporter and its collector timers.
test_packages=()
if [ "${1:-}" = --test ]; then
  command -v promtool >/dev/null 2>&1 || test_packages+=(prometheus)
  command -v shellcheck >/dev/null 2>&1 || test_packages+=(shellcheck)
  [ -x /usr/sbin/logrotate ] || test_packages+=(logrotate)
  command -v systemd-analyze >/dev/null 2>&1 || test_packages+=(systemd)
  # tests/reliability/: several "hosts" (bindfs view, skewed clock), syscall traces.
  command -v bindfs >/dev/null 2>&1 || test_packages+=(bindfs)
  [ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || test_packages+=(faketime)
  command -v strace >/dev/null 2>&1 || test_packages+=(strace)
  # tests/reliability/test_netfs_hosts.py: a spool on sshfs served by sshd in a network
  # namespace (iproute2 for `ip netns`).
  command -v sshfs >/dev/null 2>&1 || test_packages+=(sshfs)
  [ -x /usr/sbin/sshd ] || test_packages+=(openssh-server)
  command -v ip >/dev/null 2>&1 || test_packages+=(iproute2)
  # tests/reliability/test_gluster_hosts.py: a replica-3 GlusterFS volume served by three
  # glusterds in network namespaces, mounted by FUSE clients in others.
  [ -x /usr/sbin/glusterd ] || test_packages+=(glusterfs-server)
  [ -x /usr/sbin/mount.glusterfs ] || test_packages+=(glusterfs-client)
  # tests/e2e/test_uploads.py: real scp, sftp and rsync uploads into a real sshd on loopback.
  command -v scp >/dev/null 2>&1 || test_packages+=(openssh-client)
  command -v rsync >/dev/null 2>&1 || test_packages+=(rsync)
fi
if [ ${#test_packages[@]} -gt 0 ]; then
  say "installing Debian packages for the tests: ${test_packages[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${test_packages[@]}" >/dev/null
fi

node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 18 ]; then
  echo "spoolrender needs Node >= 18 for Remotion 4 (found $(node --version))" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  python3 -m venv .venv
fi
stamp=.venv/.spoolrender-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "installing spoolrender into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi

lock_hash="$(sha256sum remotion/package-lock.json | cut -c1-16)"
if [ "$(cat remotion/node_modules/.spoolrender-lock 2>/dev/null)" != "$lock_hash" ]; then
  say "installing the Remotion project's npm packages (npm ci)"
  (cd remotion && npm ci --no-audit --no-fund --loglevel=error)
  echo "$lock_hash" > remotion/node_modules/.spoolrender-lock
fi

# --test: a Remotion project on another Remotion 4 version than remotion/ (the newest
# version that remotion, @remotion/cli, @remotion/renderer and @remotion/bundler all have
# on the registry), shaped like Remotion's starters: only remotion and @remotion/cli are
# listed, the renderer and bundler come with the CLI. tests/remotion/test_projects.py links its
# projects' node_modules here. Installed once; later runs only check the stamp.
# Also a starter installed the way the registry gives it (issue 22): remotion 4.0.541 beside
# @remotion/cli and everything it pulls in at 4.0.529, each with its own nested remotion.
# Also the packages of tests/remotion/test_conformance.py's Tailwind, React Three Fiber and Skia
# shapes, in one tree on the newest version @remotion/tailwind-v4 and @remotion/three have
# (4.0.527; @remotion/skia stops at 4.0.508, a mixed version as a Skia user gets it).
# install_test_project DIR REMOTION_VERSION CLI_VERSION [EXTRA_DEPENDENCIES_JSON]
# The stamp holds the extra dependencies: a changed list installs again.
install_test_project() {
  local extra="${4:-}"
  if [ ! -f "$1/node_modules/.spoolrender-installed" ] || [ "$(cat "$1/node_modules/.spoolrender-installed")" != "$extra" ]; then
    say "installing remotion $2 with @remotion/cli $3 ${extra:+and $extra }for the project-shape tests ($1)"
    mkdir -p "$1"
    cat > "$1/package.json" <<JSON
{"name": "$(basename "$1")", "private": true, "dependencies": {"remotion": "$2",
 "@remotion/cli": "$3", "react": "19.2.0", "react-dom": "19.2.0"${extra:+, $extra}}}
JSON
    (cd "$1" && npm install --no-audit --no-fund --loglevel=error)
    printf '%s' "$extra" > "$1/node_modules/.spoolrender-installed"
  fi
}
# --test: checkov, the security scanner tests/e2e/test_contrib_kubernetes.py runs on
# contrib/kubernetes/ (non-root, read-only root filesystem, resource limits). A venv of its
# own: its ~100 dependencies pin versions of libraries spoolrender's venv also has.
# Measured 2026-12-02 (empty pip cache, load 9-18): 84 s, 291 MB; a scan takes 3-5 s.
checkov_version=3.3.30
# In the background, beside the npm installs below: each waits on downloads and unpacking
# as much as on the CPU, so together they take less than one after the other.
checkov_install=
if [ "${1:-}" = --test ] && [ "$(cat .cache/checkov/.spoolrender-installed 2>/dev/null)" != "$checkov_version" ]; then
  say "installing checkov $checkov_version into .cache/checkov for the Kubernetes manifests' tests"
  (
    python3 -m venv .cache/checkov
    .cache/checkov/bin/python -m pip install -q "checkov==$checkov_version"
    echo "$checkov_version" > .cache/checkov/.spoolrender-installed  # last: a killed pip leaves no stamp
  ) &
  checkov_install=$!
fi
if [ "${1:-}" = --test ]; then
  install_test_project .cache/remotion-4.0.527 4.0.527 4.0.527
  install_test_project .cache/remotion-mixed 4.0.541 4.0.529
  install_test_project .cache/remotion-shapes 4.0.527 4.0.527 '"@remotion/tailwind-v4": "4.0.527",
 "@remotion/three": "4.0.527", "three": "0.187.0", "@react-three/fiber": "9.8.2", "@remotion/skia": "4.0.508",
 "@shopify/react-native-skia": "2.2.12"'
fi
# set -e: a failed checkov install fails the set-up here, as in the foreground.
if [ -n "$checkov_install" ]; then wait "$checkov_install"; fi
