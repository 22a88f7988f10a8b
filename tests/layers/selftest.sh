#!/bin/sh
# The layer check catches what it is for: it is run on a made-up library
# object and app archive with a misnamed function each, and must fail
# naming both. usage: selftest.sh CHECK_LAYERS.PY SOURCE_DIR PYTHON CC
set -u
check=$1 src=$2 python=$3 cc=$4
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/erma_objects.dir/rpc"
printf 'int erma_hidden(void) { return 1; }\nint erma__fine(void) { return 2; }\n' >"$dir/a.c"
printf 'int erma_kv_thing(void) { return 3; }\nint kv_thing(void) { return 4; }\n' >"$dir/b.c"
"$cc" -c "$dir/a.c" -o "$dir/erma_objects.dir/rpc/a.c.o" && "$cc" -c "$dir/b.c" -o "$dir/b.o" &&
    ar rc "$dir/libapp.a" "$dir/b.o" || exit 1
out=$("$python" "$check" "$src" "$dir/erma_objects.dir/rpc/a.c.o" --apps "$dir/libapp.a")
rc=$?
printf '%s\n' "$out"
fail=0
[ $rc -eq 1 ] || { echo "FAIL: the check exited $rc, not 1"; fail=1; }
for want in 'rpc/a.c defines erma_hidden, in no public header' \
            'libapp.a defines erma_kv_thing' ; do
    printf '%s\n' "$out" | grep -qF "$want" || { echo "FAIL: no violation '$want'"; fail=1; }
done
for unwanted in erma__fine kv_thing; do
    printf '%s\n' "$out" | grep -q "defines $unwanted\\b" &&
        { echo "FAIL: $unwanted reported"; fail=1; }
done
[ $fail -eq 0 ] && echo "layer check self-test: misnamed functions caught"
exit $fail
