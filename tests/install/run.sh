#!/usr/bin/env bash
# meson install into a DESTDIR, then what a C user does with it (issue 16, item 9):
# docs/client.md's "Building against an installed kiln" program, taken from the document as
# it is, built with `pkg-config --cflags --libs kiln` (shared, then --static) and run against
# the installed kilnd; the installed files the docs promise are checked; the unit is checked
# with systemd-analyze where it exists, and run by systemd in a container (nspawn.sh).
#   tests/install/run.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$1 work=$2
top=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$work"
mkdir -p "$work"
dest=$work/dest
prefix=$(meson introspect "$build" --buildoptions | /usr/bin/python3 -c \
  'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
fail() { echo "install: FAIL: $*" >&2; exit 1; }
DESTDIR=$dest meson install -C "$build" --no-rebuild --quiet
root=$dest$prefix
libdir=
for d in "$root"/lib/*/pkgconfig "$root"/lib/pkgconfig "$root"/lib64/pkgconfig; do
  if [ -z "$libdir" ] && [ -e "$d/kiln.pc" ]; then libdir=$(dirname "$d"); fi
done

for f in include/kiln/client.h include/kiln/kernel.h include/kiln/base/status.h include/kiln/protocol/tensor.h \
         bin/kilnd bin/kiln libexec/kiln/kiln-compile-worker libexec/kiln/kiln-device-worker \
         lib/systemd/system/kilnd.service lib/sysusers.d/kiln.conf etc/kiln/kilnd.conf; do
  [ -e "$root/$f" ] || fail "meson install did not install $f"
done
[ -n "$libdir" ] || fail "no kiln.pc under $root/lib*"
[ -e "$libdir/libkiln.so" ] && [ -e "$libdir/libkiln.a" ] || fail "libkiln.so and libkiln.a are not in $libdir"
if command -v scdoc >/dev/null; then
  for f in share/man/man8/kilnd.8 share/man/man1/kiln.1; do [ -s "$root/$f" ] || fail "no $f"; done
fi

# libkiln.so exports the installed headers' functions only (clients/c/libkiln.map)
extra=$(nm -D --defined-only "$libdir/libkiln.so" | awk '$2 == "T" {print $3}' |
  grep -v '^kiln_\(client\|reply\|object\|status\|code\|dtype\|tensor\)_' || true)
[ -z "$extra" ] || fail "libkiln.so exports more than its headers: $(head -n 5 <<<"$extra" | tr '\n' ' ')"

# the program, exactly as docs/client.md shows it
/usr/bin/python3 - "$top/docs/client.md" "$work/hello_kiln.c" <<'PY'
import re, sys
doc = open(sys.argv[1]).read()
sec = doc.split("## Building against an installed kiln", 1)[1]
code = re.search(r"```c\n(.*?)```", sec, re.S).group(1)
open(sys.argv[2], "w").write(code)
PY
export PKG_CONFIG_PATH=$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$dest
cflags=$(pkg-config --cflags kiln) libs=$(pkg-config --libs kiln) slibs=$(pkg-config --static --libs kiln)
cc -Wall -Werror "$work/hello_kiln.c" $cflags $libs -Wl,-rpath,"$libdir" -o "$work/hello_shared"
cc -Wall -Werror "$work/hello_kiln.c" $cflags -Wl,-Bstatic -lkiln -Wl,-Bdynamic \
  $(sed 's/-lkiln\b//' <<<"$slibs") -o "$work/hello_static"
# ldd's output is read whole before it is searched: `ldd | grep -q` under pipefail fails when
# grep, having matched, exits while ldd is still writing (SIGPIPE; seen in CI under load)
deps=$(ldd "$work/hello_shared")
grep -q "$libdir/libkiln.so" <<<"$deps" || fail "hello_shared does not use the installed libkiln.so: $deps"
deps=$(ldd "$work/hello_static")
! grep -q libkiln <<<"$deps" || fail "hello_static links libkiln.so: $deps"

# against the installed kilnd and workers
sock=$work/kiln.sock
mkfifo "$work/ready"
"$root/bin/kilnd" --listen "unix:$sock" --cache-dir "$work/cache" --devices cpu --compile-workers 1 \
  --ready-fd 3 3>"$work/ready" 2>"$work/kilnd.log" &
kpid=$!
trap 'kill $kpid 2>/dev/null || true' EXIT
# kilnd writes its listeners to the fd and closes it once they are up (EOF ends the read)
ready=$(timeout 30 cat "$work/ready") || true
[ -n "$ready" ] || fail "the installed kilnd did not start: $(cat "$work/kilnd.log")"
for v in shared static; do
  out=$("$work/hello_$v" "unix:$sock")
  [ "$out" = "round trip through unix:$sock: ok" ] || fail "hello_$v said: $out"
done
"$root/bin/kiln" --url "unix:$sock" ping >/dev/null || fail "the installed kiln CLI cannot ping"
kill -TERM $kpid
wait $kpid || fail "kilnd did not exit 0 on SIGTERM"
trap - EXIT

if command -v systemd-analyze >/dev/null; then
  # the unit as installed, its ExecStart pointing into the DESTDIR so the binary is found
  sed "s#^ExecStart=$prefix#ExecStart=$root#" "$root/lib/systemd/system/kilnd.service" > "$work/kilnd.service"
  out=$(systemd-analyze verify --man=no "$work/kilnd.service" 2>&1) || fail "systemd-analyze verify: $out"
  if [ -n "$out" ]; then echo "$out" >&2; fail "systemd-analyze verify complained"; fi
fi
# and run under a real systemd, in a container, where one can boot here
bash "$top/tests/install/nspawn.sh" "$root" "$prefix" "$work/nspawn"
echo "install: the installed files, hello_kiln (shared and static) and the unit: ok"
