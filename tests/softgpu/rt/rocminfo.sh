#!/bin/sh
# Runs Debian's rocminfo (an HSA client written by AMD, not by kiln) against the stand-in runtime.
#   rocminfo.sh LIBDIR [ROCMINFO]
# rocminfo checks for a GPU driver before it calls hsa_init: `lsmod | grep amdgpu` must print
# something and /dev/kfd must open read-write. The stand-in needs neither (it never opens /dev/kfd),
# so this script answers both checks with placeholders that say what they are, without touching
# the machine: a private mount namespace with its own /dev (the usual nodes bound from the real
# one, /dev/kfd bound to /dev/null) and an `lsmod` first in PATH. Everything rocminfo prints after
# those checks comes from the stand-in through the HSA API, loaded by the dynamic linker from
# LIBDIR/libhsa-runtime64.so.1 at ROCr's symbol version.
set -eu
libdir=$1
rocminfo=${2:-/usr/bin/rocminfo}
[ -x "$rocminfo" ] || { echo "rocminfo.sh: $rocminfo is not installed (apt-get install rocminfo)" >&2; exit 77; }
[ -e "$libdir/libhsa-runtime64.so.1" ] || { echo "rocminfo.sh: no $libdir/libhsa-runtime64.so.1" >&2; exit 2; }
tmp=$(mktemp -d /tmp/softgpu-rocminfo.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin" "$tmp/olddev"
cat > "$tmp/bin/lsmod" <<'SHIM'
#!/bin/sh
echo "amdgpu 0 0 - Live 0x0 (placeholder for rocminfo: the softgpu stand-in uses no kernel driver)"
SHIM
chmod +x "$tmp/bin/lsmod"
export SOFTGPU_ROCMINFO_TMP="$tmp" SOFTGPU_ROCMINFO_LIBDIR="$libdir" SOFTGPU_ROCMINFO_BIN="$rocminfo"
# root may make a mount namespace directly; anyone else through a user namespace
ns="--mount"
[ "$(id -u)" -eq 0 ] || ns="--user --map-root-user --mount"
unshare $ns --propagation private sh -eu -c '
  t=$SOFTGPU_ROCMINFO_TMP
  mount --rbind /dev "$t/olddev"
  mount -t tmpfs -o mode=755,size=64k softgpu-dev /dev
  for n in null zero full random urandom tty; do
    if [ -e "$t/olddev/$n" ]; then : > "/dev/$n"; mount --bind "$t/olddev/$n" "/dev/$n"; fi
  done
  ln -s /proc/self/fd /dev/fd
  : > /dev/kfd
  mount --bind "$t/olddev/null" /dev/kfd
  # SGRT_PRELOAD: the sanitizer runtime, when the stand-in was built with one
  PATH="$t/bin:$PATH" LD_LIBRARY_PATH="$SOFTGPU_ROCMINFO_LIBDIR" LD_PRELOAD="${SGRT_PRELOAD:-}" \
    exec "$SOFTGPU_ROCMINFO_BIN"
'
