#!/usr/bin/env bash
# The installed kilnd.service under a real systemd (issue 16, item 6): a container booted
# with systemd-nspawn from this machine's own /usr (--volatile=yes: a tmpfs root, /usr read-only,
# /etc empty, so nothing of the host's configuration comes along), the DESTDIR's prefix bound
# over the prefix. Inside: systemd-sysusers makes the kiln group, `systemctl start kilnd`
# returns once kilnd said READY=1 (Type=notify), the socket is 0660 root:kiln, a member of
# kiln compiles and launches a kernel through it (the hardened sandbox and the workers' uid
# drop at work) and finds it without a URL, a user outside the group is refused, `reload`
# is SIGHUP, a SIGKILLed kilnd is restarted, `stop` drains and leaves no process behind.
#   tests/install/nspawn.sh DESTDIR_PREFIX_ROOT PREFIX WORK_DIR
# Skips (exit 0, saying why) where no container can boot: no systemd-nspawn, not root, a
# prefix outside /usr, or a machine whose kernel or cgroups refuse the container.
set -euo pipefail
root=$1 prefix=$2 work=$3
top=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "install: nspawn: skipped: $*"; exit 0; }
fail() { echo "install: nspawn: FAIL: $*" >&2; [ -s "$work/nspawn.log" ] && tail -n 30 "$work/nspawn.log" >&2; exit 1; }
command -v systemd-nspawn >/dev/null || skip "no systemd-nspawn (Debian's systemd-container)"
[ "$(id -u)" = 0 ] || skip "not root"
case $prefix in /usr/*) ;; *) skip "the prefix $prefix is not under /usr (only /usr is carried into the container)";; esac
mkdir -p "$work"
name=kiln-install-$$
# numpy finds its BLAS through /etc/alternatives, which the empty /etc lacks
systemd-nspawn -D / --volatile=yes -M "$name" --register=no --keep-unit --console=read-only --private-network \
  --bind-ro="$root:$prefix" --bind-ro="$top/clients/python:/opt/kilnpy" --bind-ro=/etc/alternatives \
  -b systemd.firstboot=off >"$work/nspawn.log" 2>&1 &
ns=$!
trap 'kill "$ns" 2>/dev/null || true; wait "$ns" 2>/dev/null || true' EXIT
pid=
for _ in $(seq 600); do
  pid=$(pgrep -P "$ns" -x systemd || true)
  [ -n "$pid" ] || ! kill -0 "$ns" 2>/dev/null && break
  sleep 0.1
done
[ -n "$pid" ] || skip "no container booted here: $(tr -d '\r' <"$work/nspawn.log" | grep -v '^$' | tail -n 3 | tr '\n' ' ')"
ct() { nsenter -t "$pid" -a "$@"; }
state=
for _ in $(seq 240); do  # systemctl answers once the container's manager is up
  state=$(timeout 120 nsenter -t "$pid" -a systemctl is-system-running --wait 2>/dev/null || true)
  [ -n "$state" ] && break
  sleep 0.5
done
case $state in running|degraded) ;; *) skip "the container's systemd did not come up (state '$state')";; esac
as() { local u=$1; shift; ct setpriv --reuid="$u" --regid=100 --init-groups env HOME=/tmp PYTHONPATH=/opt/kilnpy "$@"; }

ct systemd-sysusers
ct getent group kiln >/dev/null || fail "systemd-sysusers made no kiln group from $prefix/lib/sysusers.d"
ct useradd -M -g 100 -G kiln member
ct useradd -M -g 100 outsider
ct systemctl daemon-reload
ct systemctl start kilnd || fail "systemctl start kilnd: $(ct journalctl -u kilnd --no-pager | tail -n 20)"
[ "$(ct systemctl is-active kilnd)" = active ] || fail "kilnd is not active after start"
[ "$(ct stat -c '%a %U %G' /run/kiln/kiln.sock)" = "660 root kiln" ] ||
  fail "the socket is $(ct stat -c '%a %U %G' /run/kiln/kiln.sock), not 660 root kiln"

client='import sys, numpy as np, kiln
s = kiln.connect(*sys.argv[1:])
ir = "define void @k(ptr %p) section \"kiln.kernel\" {\nentry:\n  store i32 9, ptr %p\n  ret void\n}\n"
x = kiln.nd.array(np.zeros(4, "int32"), s.cpu(0))
s.compile(ir, target="cpu", format="llvm")["k"](x, grid=1, block=1)
print(s.url, x.numpy().tolist())'
out=$(as member /usr/bin/python3 -c "$client" 2>&1) || fail "a member of kiln: $out"
[ "$out" = "unix:/run/kiln/kiln.sock [9, 0, 0, 0]" ] || fail "a member of kiln, without a URL: $out"
out=$(as outsider env KILN_AUTOSTART=0 /usr/bin/python3 -c "$client" unix:/run/kiln/kiln.sock 2>&1) &&
  fail "a user outside kiln connected: $out"
grep -q "Permission denied" <<<"$out" || fail "a user outside kiln: $out"
# nor through the client's search list: the installed file opens no TCP port around the group
out=$(as outsider env KILN_AUTOSTART=0 /usr/bin/python3 -c "$client" 2>&1) && fail "a user outside kiln connected: $out"
grep -q "no kilnd found" <<<"$out" || fail "a user outside kiln, without a URL: $out"
as member "$prefix/bin/kiln" ping >/dev/null || fail "the kiln CLI of a member cannot ping"

ct systemctl reload kilnd || fail "systemctl reload kilnd"
main=$(ct systemctl show -P MainPID kilnd)
ct systemctl kill -s KILL --kill-whom=main kilnd
for _ in $(seq 100); do
  now=$(ct systemctl show -P MainPID kilnd)
  [ "$now" != 0 ] && [ "$now" != "$main" ] && [ "$(ct systemctl is-active kilnd)" = active ] && break
  sleep 0.1
done
[ "$(ct systemctl show -P NRestarts kilnd)" = 1 ] || fail "a SIGKILLed kilnd was not restarted"
out=$(as member /usr/bin/python3 -c "$client" 2>&1) || fail "after the restart: $out"
ct systemctl stop kilnd
[ "$(ct systemctl show -P Result kilnd)" = success ] || fail "kilnd did not stop cleanly: $(ct journalctl -u kilnd --no-pager | tail -n 10)"
left=$(ct pgrep -a kiln || true)
[ -z "$left" ] || fail "processes left after stop: $left"
journal=$(ct journalctl -u kilnd --no-pager)  # whole, then searched: no SIGPIPE under pipefail
grep -q "event=exit" <<<"$journal" || fail "kilnd's exit line is not in the journal"
ct systemctl poweroff || true
wait "$ns" || true
trap - EXIT
echo "install: the unit under systemd $(systemd --version | head -n 1 | cut -d' ' -f2) in a container: ok"
