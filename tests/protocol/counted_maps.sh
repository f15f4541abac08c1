#!/bin/sh
# Every map kilnd and its workers pack counts its own fields (protocol/rpc.h kiln_fields_t):
# a hand-written msgpack_pack_map(n) with a wrong n corrupts the stream without an error.
# Fails naming each msgpack_pack_map call in those folders but the builder's own.
#   counted_maps.sh SOURCE_ROOT
cd "$1" || exit 2
found=$(grep -n 'msgpack_pack_map *(' server/*.c protocol/*.c device/worker/*.c compiler/worker/*.c |
        grep -v '^protocol/rpc\.c:')
if [ -n "$found" ]; then
  echo "$found"
  echo "hand-counted maps: pack them with kiln_fields_begin/_end (protocol/rpc.h)"
  exit 1
fi
echo "no hand-counted map in server/, protocol/, device/worker/, compiler/worker/"
