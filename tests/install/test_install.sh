#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR PORT [EXTRA_FLAGS] - erma as a user gets it:
# installs BUILD_DIR into a temporary prefix, checks what liberma.so exports
# and needs, builds consumer.c out of tree as C with pkg-config and as C++
# with find_package(erma) and as C with add_subdirectory, runs each (an RPC
# and a one-sided READ over udp on 127.0.0.1, ports PORT..PORT+5), builds
# reconnect.c the same way and runs it (10,000 checked RPCs across a
# server's kill and restart, port PORT+6, with and without a psk), builds
# apps/hello_rma and runs its server and client (port PORT+7), builds and
# runs the program in README.md (port 31850), and checks
# that a program runs without the transport modules: dpdk:// fails naming
# the missing module, udp:// works. The application headers show no
# congestion-control internals and the driver SDK headers (erma/sdk/) are
# installed only with -DERMA_INSTALL_SDK=ON (the add_subdirectory build
# asks for them, installs, and builds a program on them). EXTRA_FLAGS (the sanitizer flags of an
# ASan build) go to every compile and link.
set -euo pipefail
build=$1 src=$2 port=$3 extra=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
prefix=$tmp/prefix
# Installed paths as the consumer's build will see them
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
lib=$(dirname "$(find "$prefix" -name liberma.so -print -quit)")
[ -n "$lib" ] || fail "no liberma.so installed"
for f in "$lib/liberma.a" "$lib/liberma.so.0" "$lib/pkgconfig/erma.pc" \
         "$lib/cmake/erma/erma-config.cmake" "$prefix/include/erma/erma.h" \
         "$prefix/include/erma/version.h"; do
  [ -e "$f" ] || fail "$f not installed"
done
echo "installed into $prefix: $(cd "$prefix" && find . -type f | wc -l) files"

# The application API: no driver SDK, no cc/ internals behind erma.h.
[ ! -e "$prefix/include/erma/sdk" ] || fail "the driver SDK headers are installed by default"
cc -std=c11 -E -P -I"$prefix/include" -x c - <<< '#include <erma/erma.h>' > "$tmp/erma_h.i"
internals=$(grep -noE 'struct erma_(timely|wheel|window)\b|struct erma_(timely|wheel|window)_[a-z_]+ *\{|\berma_(timely|wheel|window)[a-z_]* *\(' \
  "$tmp/erma_h.i" || true)
[ -z "$internals" ] || fail "erma/erma.h declares cc/ internals: $internals"
echo "erma/erma.h: $(wc -l < "$tmp/erma_h.i") lines preprocessed, no erma_timely, erma_wheel or erma_window declaration; no erma/sdk/"

# Only erma_ symbols leave the shared library; it needs neither DPDK nor rdma-core.
others=$(nm -D --defined-only "$lib/liberma.so" | awk '$3 !~ /^erma_/ {print $3}')
[ -z "$others" ] || fail "liberma.so exports non-erma symbols: $others"
echo "liberma.so exports $(nm -D --defined-only "$lib/liberma.so" | wc -l) symbols, all erma_"
needed=$(readelf -d "$lib/liberma.so" | awk '/NEEDED/ {print $5}' | tr -d '[]' | tr '\n' ' ')
case "$needed" in *dpdk*|*rte_*|*ibverbs*) fail "liberma.so needs $needed";; esac
readelf -d "$lib/liberma.so" | grep -q 'SONAME.*liberma.so.0' || fail "no soname liberma.so.0"
echo "liberma.so needs: $needed"

bin=$prefix/bin # lib/erma beside it is where an installed program finds modules
mkdir -p "$bin"
export PKG_CONFIG_PATH=$lib/pkgconfig
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$here/consumer.c" -o "$bin/consumer_c" \
  $(pkg-config --cflags --libs erma) -Wl,-rpath,"$lib"
echo "== C, pkg-config"
"$bin/consumer_c" 127.0.0.1 "$port" $((port + 1))

echo "== C, pkg-config: RPCs across a server's restart, cfg.reconnect"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$here/reconnect.c" -o "$bin/reconnect" \
  $(pkg-config --cflags --libs erma) -Wl,-rpath,"$lib"
"$bin/reconnect" 127.0.0.1 $((port + 6))
"$bin/reconnect" 127.0.0.1 $((port + 6)) psk

echo "== C, pkg-config: apps/hello_rma, two processes (port PORT+7)"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$src/apps/hello_rma/hello_rma.c" -o "$bin/hello_rma" \
  $(pkg-config --cflags --libs erma) -Wl,-rpath,"$lib"
"$bin/hello_rma" server "udp://127.0.0.1:$((port + 7))" & hello_pid=$!
sleep 0.2
hello_rc=0
timeout 60 "$bin/hello_rma" client "udp://127.0.0.1:$((port + 7))" || hello_rc=$?
[ $hello_rc -eq 0 ] || kill "$hello_pid" 2>/dev/null || true
wait "$hello_pid" || hello_rc=1
[ $hello_rc -eq 0 ] || fail "hello_rma"

echo "== the README's program, pkg-config, as the README builds and runs it"
sed -n '/^```c$/,/^```$/p' "$src/README.md" | sed '1d;$d' > "$tmp/readme.c"
# shellcheck disable=SC2046,SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$tmp/readme.c" -o "$bin/readme" \
  $(pkg-config --cflags --libs erma)
libdir=$(pkg-config --variable=libdir erma)
[ "$(cd "$libdir" && pwd -P)" = "$(cd "$lib" && pwd -P)" ] || fail "erma.pc's libdir $libdir is not $lib"
# without the path the loader stops it at start, naming liberma.so.0 (unless
# an erma installed in a system folder stands in)
if env -u LD_LIBRARY_PATH "$bin/readme" 2> "$tmp/noload.err"; then
  echo "  (a liberma.so.0 in a system folder ran it)"
else
  grep -q 'liberma.so.0' "$tmp/noload.err" || { cat "$tmp/noload.err"; fail "no loader error"; }
  sed 's/^/  without LD_LIBRARY_PATH: /' "$tmp/noload.err"
fi
LD_LIBRARY_PATH=$libdir "$bin/readme"

echo "== C++, find_package(erma)"
cmake -S "$here" -B "$tmp/cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCONSUMER_LANG=CXX \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror $extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" \
  > "$tmp/cxx.log" || { cat "$tmp/cxx.log"; fail "cmake (C++)"; }
cmake --build "$tmp/cxx" > "$tmp/cxx_build.log" 2>&1 || { cat "$tmp/cxx_build.log"; fail "build (C++)"; }
# run from its build tree, as the README says: CMake gave it liberma's folder
env -u LD_LIBRARY_PATH "$tmp/cxx/consumer" 127.0.0.1 $((port + 2)) $((port + 3))

echo "== modules"
"$bin/consumer_c" --available verbs || fail "the verbs module does not load from $lib/erma"
mv "$lib/erma" "$lib/erma.hidden"
(unset ERMA_MODULE_DIR; "$bin/consumer_c" --open "dpdk://10.0.0.1:7000" 2> "$tmp/open.err") ||
  { cat "$tmp/open.err"; fail "dpdk:// without its module did not fail with ERMA_ENOTSUP"; }
grep -q 'erma_dpdk.so' "$tmp/open.err" || { cat "$tmp/open.err"; fail "the error does not name erma_dpdk.so"; }
sed 's/^/  stderr: /' "$tmp/open.err"
"$bin/consumer_c" 127.0.0.1 $((port + 4)) $((port + 5))
mv "$lib/erma.hidden" "$lib/erma"

echo "== C, add_subdirectory(erma)"
cmake -S "$here" -B "$tmp/sub" -DERMA_SOURCE="$src" -DCONSUMER_LANG=C -DERMA_INSTALL_SDK=ON \
  -DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" > "$tmp/sub.log" ||
  { cat "$tmp/sub.log"; fail "cmake (add_subdirectory)"; }
cmake --build "$tmp/sub" -j "$(nproc)" --target consumer > "$tmp/sub_build.log" 2>&1 ||
  { cat "$tmp/sub_build.log"; fail "build (add_subdirectory)"; }
"$tmp/sub/consumer" 127.0.0.1 "$port" $((port + 1))

echo "== the driver SDK, -DERMA_INSTALL_SDK=ON"
cmake --build "$tmp/sub" -j "$(nproc)" > "$tmp/sdk_build.log" 2>&1 ||
  { cat "$tmp/sdk_build.log"; fail "build (SDK)"; }
cmake --install "$tmp/sub" --prefix "$tmp/sdk" > "$tmp/sdk_install.log"
for h in transport_driver wire pool cc rand; do
  [ -e "$tmp/sdk/include/erma/sdk/$h.h" ] || fail "erma/sdk/$h.h not installed with ERMA_INSTALL_SDK=ON"
done
sdklib=$(dirname "$(find "$tmp/sdk" -name liberma.so -print -quit)")
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $extra "$here/sdk_consumer.c" -o "$tmp/sdk_consumer" \
  -I"$tmp/sdk/include" -L"$sdklib" -lerma -Wl,-rpath,"$sdklib"
"$tmp/sdk_consumer"
# shellcheck disable=SC2086
c++ -std=c++17 -Wall -Wextra -Werror $extra -x c++ "$here/sdk_consumer.c" -o "$tmp/sdk_consumer_cxx" \
  -I"$tmp/sdk/include" -L"$sdklib" -lerma -Wl,-rpath,"$sdklib"
"$tmp/sdk_consumer_cxx"
echo "ok"
