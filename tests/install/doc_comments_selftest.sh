#!/bin/sh
# The doc-comment check catches what it is for: run on a made-up header, it
# must fail naming each function without a comment that says what it
# returns, and none of those with one.
# usage: doc_comments_selftest.sh CHECK PYTHON
set -u
check=$1 python=$2
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cat >"$dir/made_up.h" <<'H'
/* Returns ERMA_OK; ERMA_EINVAL for a NULL x. */
int erma_good_int(int *x);
/* Frees x. Returns nothing. */
void erma_good_void(void *x);
/* Returns true when x is set. */
bool erma_good_bool(int x);
/* Returns the count, never negative. */
static inline unsigned erma_good_inline(void) { return 1; }

int erma_bare(void);
/* Does things. */
int erma_no_codes(int x);
/* Frees x. */
void erma_void_silent(void *x);
/* The name. */
const char *erma_what_returned(void);
typedef int (*erma_not_a_function)(void);
struct erma_not_one { int (*fn)(void); };
H
out=$("$python" "$check" "$dir/made_up.h")
rc=$?
printf '%s\n' "$out"
fail=0
[ $rc -eq 1 ] || { echo "FAIL: the check exited $rc, not 1"; fail=1; }
for want in erma_bare erma_no_codes erma_void_silent erma_what_returned; do
    printf '%s\n' "$out" | grep -q ": $want: " || { echo "FAIL: $want not reported"; fail=1; }
done
for unwanted in erma_good_int erma_good_void erma_good_bool erma_good_inline \
                erma_not_a_function erma_not_one; do
    printf '%s\n' "$out" | grep -q ": $unwanted: " && { echo "FAIL: $unwanted reported"; fail=1; }
done
[ $fail -eq 0 ] && echo "doc-comment check self-test: undocumented functions caught"
exit $fail
