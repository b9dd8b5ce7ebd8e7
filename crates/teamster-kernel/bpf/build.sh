#!/bin/sh
# Builds the fast path's BPF object, reproducibly: Debian 12's clang 14 with fixed flags and no
# paths in the output. The object is committed (switch.bpf.o) so that building Teamster needs
# Rust alone; .ci/run rebuilds it with this script and fails if the bytes differ.
set -eu
cd "$(dirname "$0")"
clang -target bpf -O2 -g -Wall -Werror -fno-ident -fdebug-prefix-map="$PWD"=. \
  -I/usr/include/x86_64-linux-gnu -c switch.bpf.c -o "${1:-switch.bpf.o}"
