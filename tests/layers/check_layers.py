#!/usr/bin/env python3
"""Checks erma's layering from its sources and object files:
  - no file under rma/ includes an rpc/ header or calls an erma_rpc_ function,
    and no file under rpc/ includes an rma/ header or rma's public header
    (keys/, the key service, sits above both and may use both);
  - a layer includes only headers of layers below it;
  - within endpoint/, rpc/, rma/ and keys/, no files call each other in a circle
    (the graph of references between files, from the object files' defined
    and undefined symbols);
  - names say where they live: a function of the library named erma_...
    is declared in a public header (include/erma/), every other one is
    internal and named erma__... (as libuv's uv__), static and inline ones
    too (from the sources); the library defines no other global names;
  - the apps' archives (--apps) define no erma_ symbol: they use kv_, kvcs_,
    raftkv_.
usage: check_layers.py SOURCE_DIR OBJECT_FILE... [--apps ARCHIVE...]
  (the library's objects, as CMake's $<TARGET_OBJECTS:erma_objects> lists
  them: .../LAYER/NAME.c.o; the apps' static libraries)
Prints what it found; exits 1 on a violation."""
import os, re, subprocess, sys

src, objects = sys.argv[1], sys.argv[2:]
apps = []
if '--apps' in objects:
    apps = [a for a in objects[objects.index('--apps') + 1:] if a]
    objects = objects[:objects.index('--apps')]
LAYERS = ['common', 'transport', 'cc', 'crypto', 'endpoint', 'rpc', 'rma', 'keys']
BELOW = {  # what each layer may include: its own folder and these
    'common': set(), 'transport': {'common'}, 'cc': {'common'}, 'crypto': {'common'},
    'endpoint': {'common', 'transport', 'cc'},
    'rpc': {'common', 'transport', 'cc', 'crypto', 'endpoint'},
    'rma': {'common', 'transport', 'cc', 'crypto', 'endpoint'},
    'keys': {'common', 'transport', 'cc', 'crypto', 'endpoint', 'rpc', 'rma'},
}
PUBLIC = {  # public headers that belong to a layer
    'rpc.h': 'rpc', 'rma.h': 'rma', 'keys.h': 'keys', 'endpoint.h': 'endpoint', 'transport.h': 'transport',
    'sim.h': 'transport', 'dpdk.h': 'transport', 'verbs.h': 'transport',
    'sdk/wire.h': 'transport', 'sdk/transport_driver.h': 'transport', 'sdk/cc.h': 'cc',
}
ALLOWED_CIRCLES = set()
bad = []
sources = {}

for layer in LAYERS:
    for name in sorted(os.listdir(os.path.join(src, layer))):
        if not name.endswith(('.c', '.h')):
            continue
        path = f'{layer}/{name}'
        text = sources[path] = open(os.path.join(src, path)).read()
        for inc in re.findall(r'#include\s+"([^"]+)"', text):
            if '/' not in inc:
                continue  # the folder's own header
            top, base = inc.split('/', 1)
            owner = PUBLIC.get(base) if top == 'erma' else (top if top in LAYERS else None)
            if owner and owner != layer and owner not in BELOW[layer]:
                bad.append(f'{path} includes {inc} (layer {owner}, not below {layer})')
        if layer == 'rma' and re.search(r'\berma_rpc_\w+\s*\(', text):
            bad.append(f'{path} calls an erma_rpc_ function')

def symbols(obj):
    out = subprocess.run(['nm', obj], capture_output=True, text=True, check=True).stdout
    defined, undef = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == 'U':
            undef.add(parts[1])
        elif len(parts) == 3 and parts[1] in 'TDBR':
            defined.add(parts[2])
    return defined, undef

def reach(calls, a):
    seen, stack = set(), list(calls[a])
    while stack:
        x = stack.pop()
        if x not in seen:
            seen.add(x)
            stack.extend(calls[x])
    return seen

def circles(calls):
    """The strongly connected sets of more than one file."""
    r = {a: reach(calls, a) for a in calls}
    out = set()
    for a in calls:
        ring = frozenset({a} | {b for b in r[a] if a in r[b]})
        if len(ring) > 1:
            out.add(ring)
    return out

for layer in ['endpoint', 'rpc', 'rma', 'keys']:
    objs = sorted(o for o in objects if os.path.basename(os.path.dirname(o)) == layer)
    if not objs:
        bad.append(f'no object files of {layer}/ given')
        continue
    syms = {f'{layer}/{os.path.basename(o)[:-2]}': symbols(o) for o in objs}
    calls = {a: {b for b in syms if b != a and syms[a][1] & syms[b][0]} for a in syms}
    for ring in circles(calls):
        if ring not in ALLOWED_CIRCLES:
            bad.append('files call each other in a circle: ' + ', '.join(sorted(ring)))
    print(f'{layer}: ' + ', '.join(f'{a.split("/")[1]} -> {sorted(x.split("/")[1] for x in calls[a])}'
                                   for a in sorted(calls) if calls[a]))

def public_names():
    """Every identifier that a public header of include/erma/ mentions."""
    names = set()
    for root, _, files in os.walk(os.path.join(src, 'include', 'erma')):
        for f in files:
            if f.endswith(('.h', '.h.in')):
                names |= set(re.findall(r'\b(erma_\w+)', open(os.path.join(root, f)).read()))
    return names

declared = public_names()
for path, text in sources.items():  # static and inline functions have no symbol
    for fn in sorted(set(re.findall(r'(?<!struct )(?<!union )(?<!enum )\b(erma_[a-z0-9]\w*)\s*\(',
                                    text)) - declared):
        bad.append(f'{path} names a function {fn}, in no public header: call it erma__'
                   + fn[len('erma_'):])
for obj in sorted(objects):
    name = os.path.relpath(obj).split('erma_objects.dir/')[-1][:-2]
    for sym in sorted(symbols(obj)[0]):
        if sym.startswith(('erma__', '_')):
            continue  # internal, or the toolchain's (reserved: ASan's __odr_asan.*)
        if not sym.startswith('erma_'):
            bad.append(f'{name} defines {sym}: a global name of liberma starts with erma_')
        elif sym not in declared:
            bad.append(f'{name} defines {sym}, in no public header: call it erma__'
                       + sym[len('erma_'):])
for archive in apps:
    for sym in sorted(symbols(archive)[0]):
        if sym.startswith('erma_'):
            bad.append(f'{os.path.basename(archive)} defines {sym}: an app\'s names are its own'
                       ' (kv_, kvcs_, raftkv_)')
print(f'names: {len(objects)} objects, {len(apps)} app archives checked')

for b in bad:
    print('VIOLATION:', b)
sys.exit(1 if bad else 0)
