#!/usr/bin/env bash
# Builds the Debian package and checks what it installs, in a clean directory: every file the
# package promises is there, the binary runs, the unit is valid for systemd, the hook and the
# example configuration are usable. Prints the package's path. Needs cargo-deb (installed here
# if missing) and dpkg-deb.
#
#   packaging/build-deb.sh [--profile PROFILE] [--no-build]   # release by default; CI checks
#   a dev build's, with --no-build: the binaries already in target/ (CI's workspace build)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile="${2:?build-deb: --profile needs a cargo profile (release, dev)}"; shift 2 ;;
    --no-build) build=0; shift ;;
    *) echo "build-deb: unknown argument \`$1\` (expected --profile PROFILE or --no-build)" >&2; exit 2 ;;
  esac
done
dir=$profile
[ "$profile" = dev ] && dir=debug
command -v cargo-deb >/dev/null 2>&1 || cargo install cargo-deb --locked --quiet
# The switch, and the simulator beside it (`teamster simulate` runs it; the switch does not link it).
if [ "$build" = 1 ]; then
  cargo build --profile "$profile" -p teamster -p teamster-sim
fi
for b in teamster teamster-sim; do
  [ -x "target/$dir/$b" ] || { echo "build-deb: target/$dir/$b is not built" >&2; exit 1; }
done
rm -rf target/assets
"target/$dir/teamster" generate target/assets
deb=$(cargo deb -p teamster --no-build --profile "$profile" --quiet | tail -1)
[ -f "$deb" ] || { echo "build-deb: no package built" >&2; exit 1; }
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg-deb -x "$deb" "$root"
for f in usr/bin/teamster usr/bin/teamster-sim lib/systemd/system/teamster.service usr/share/teamster/libvirt/qemu \
  usr/share/man/man1/teamster.1.gz usr/share/man/man1/teamster-run.1.gz usr/share/man/man1/teamster-ctl-port-add.1.gz \
  usr/share/bash-completion/completions/teamster usr/share/zsh/vendor-completions/_teamster \
  usr/share/fish/vendor_completions.d/teamster.fish usr/share/doc/teamster/examples/switch.toml \
  etc/teamster/switch.toml.example usr/share/teamster/grafana/teamster.json \
  usr/share/teamster/prometheus/teamster-alerts.yml; do
  [ -s "$root/$f" ] || { echo "build-deb: $f missing from the package" >&2; exit 1; }
done
[ -x "$root/usr/bin/teamster" ] && [ -x "$root/usr/bin/teamster-sim" ] && [ -x "$root/usr/share/teamster/libvirt/qemu" ]
"$root/usr/bin/teamster" --version >/dev/null
# `teamster simulate` finds the simulator beside itself, as installed.
"$root/usr/bin/teamster" simulate --version | grep -q '^teamster-sim ' || {
  echo "build-deb: teamster simulate does not run the packaged teamster-sim" >&2; exit 1; }
dpkg-deb -f "$deb" Depends | grep -q iproute2
# The unit as systemd reads it, running the package's own binary.
if command -v systemd-analyze >/dev/null 2>&1; then
  mkdir -p "$root/etc/teamster" "$root/units"
  cp "$root/usr/share/doc/teamster/examples/switch.toml" "$root/etc/teamster/switch.toml"
  sed "s#/usr/bin/teamster#$root/usr/bin/teamster#g; s#/etc/teamster#$root/etc/teamster#g" \
    "$root/lib/systemd/system/teamster.service" > "$root/units/teamster.service"
  if ! out=$(systemd-analyze verify --man=no "$root/units/teamster.service" 2>&1) || [ -n "$out" ]; then
    echo "build-deb: systemd-analyze verify: $out" >&2
    exit 1
  fi
fi
# The example configuration parses (its interfaces are this host's to choose: not checked).
check=$("$root/usr/bin/teamster" run "$root/etc/teamster/switch.toml" --check 2>&1 || true)
if ! echo "$check" | grep -q "no interface named \`eth1\`\|is valid"; then
  echo "build-deb: the example switch.toml: $check" >&2
  exit 1
fi
echo "$deb"
