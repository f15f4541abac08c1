#!/bin/sh
# Every map kiln packs counts its own fields (protocol/rpc.h kiln_fields_t): a hand-written
# msgpack_pack_map(n) with a wrong n corrupts the stream without an error.
# Fails naming each msgpack_pack_map call in kilnd (server/ and its subfolders), protocol/,
# the workers (device/worker/; compiler/ whole, which runs in the compile worker) and the C
# client (clients/c/), but the builder's own in protocol/rpc.c. A folder gone is a failure
# too (a move must not end the check quietly).
#   counted_maps.sh SOURCE_ROOT
#   counted_maps.sh --self-test    (the check finds a map planted in a subfolder, and one never ended)
dirs="server protocol device/worker compiler clients/c"

check() {
  for d in $dirs; do
    [ -d "$1/$d" ] || { echo "counted_maps.sh: no folder $d under $1"; return 2; }
  done
  found=$(cd "$1" && find $dirs -name '*.c' -print | sort | xargs grep -n 'msgpack_pack_map *(' |
          grep -v '^protocol/rpc\.c:')
  if [ -n "$found" ]; then
    echo "$found"
    echo "hand-counted maps: pack them with kiln_fields_begin/_end (protocol/rpc.h)"
    return 1
  fi
  # A map begun and never ended keeps the 0-field header kiln_fields_begin reserved, and the
  # reader takes its fields for what follows: every function ends as many maps as it begins.
  unended=$(cd "$1" && find $dirs -name '*.c' -print | sort | grep -v '^protocol/rpc\.c$' |
            xargs awk 'FNR == 1 { start = 0; b = 0; e = 0 }
                       /^[A-Za-z]/ && !start { start = FNR }
                       { b += gsub(/kiln_fields_begin *\(/, "&"); e += gsub(/kiln_fields_end *\(/, "&") }
                       /^}/ { if (b != e) printf "%s:%d: %d kiln_fields_begin, %d kiln_fields_end\n", FILENAME, start, b, e
                              start = 0; b = 0; e = 0 }')
  if [ -n "$unended" ]; then
    echo "$unended"
    echo "a function begins more counted maps than it ends (or fewer)"
    return 1
  fi
  echo "no hand-counted map in $dirs (subfolders included)"
}

if [ "$1" = --self-test ]; then
  t=$(mktemp -d) || exit 2
  trap 'rm -rf "$t"' EXIT
  for d in $dirs; do mkdir -p "$t/$d"; done
  echo 'void f(msgpack_packer *pk) { kiln_fields_begin(&m, pk); }' > "$t/server/ok.c"
  echo 'void g(msgpack_packer *pk) { msgpack_pack_map(pk, 0); }' > "$t/protocol/rpc.c"
  check "$t" > /dev/null || { echo "self-test: a clean tree was refused"; exit 1; }
  mkdir -p "$t/server/fleet/deep"
  echo 'void h(msgpack_packer *pk) { msgpack_pack_map (pk, 2); }' > "$t/server/fleet/deep/bad.c"
  out=$(check "$t")
  [ $? = 1 ] && echo "$out" | grep -q '^server/fleet/deep/bad\.c:1:' ||
    { echo "self-test: a map in a subfolder was missed: $out"; exit 1; }
  rm "$t/server/fleet/deep/bad.c"
  printf 'static void p(msgpack_packer *pk) {\n  kiln_fields_begin(&m, pk);\n  kiln_fields_key(&m, "a");\n}\n' > "$t/clients/c/open.c"
  out=$(check "$t")
  [ $? = 1 ] && echo "$out" | grep -q '^clients/c/open\.c:1: 1 kiln_fields_begin, 0 kiln_fields_end' ||
    { echo "self-test: a map never ended was missed: $out"; exit 1; }
  rm "$t/clients/c/open.c"
  rm -r "$t/compiler"
  check "$t" > /dev/null
  [ $? = 2 ] || { echo "self-test: a missing folder was not reported"; exit 1; }
  echo "self-test passed"
  exit 0
fi
check "$1"
