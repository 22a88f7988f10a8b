#!/usr/bin/env python3
"""Checks erma's layering from its sources and object files:
  - no file under rma/ includes an rpc/ header or calls an erma_rpc_ function,
    and no file under rpc/ includes an rma/ header or rma's public header;
  - a layer includes only headers of layers below it;
  - within endpoint/, rpc/ and rma/, no files call each other in a circle
    (the graph of references between files, from the object files' defined
    and undefined symbols), except rpc/proto.c and rpc/session.c.
usage: check_layers.py SOURCE_DIR OBJECT_FILE...  (the library's objects, as
CMake's $<TARGET_OBJECTS:erma_objects> lists them: .../LAYER/NAME.c.o)
Prints what it found; exits 1 on a violation."""
import os, re, subprocess, sys

src, objects = sys.argv[1], sys.argv[2:]
LAYERS = ['common', 'transport', 'cc', 'endpoint', 'rpc', 'rma']
BELOW = {  # what each layer may include: its own folder and these
    'common': set(), 'transport': {'common'}, 'cc': {'common'},
    'endpoint': {'common', 'transport', 'cc'},
    'rpc': {'common', 'transport', 'cc', 'endpoint'},
    'rma': {'common', 'transport', 'cc', 'endpoint'},
}
PUBLIC = {  # public headers that belong to a layer
    'rpc.h': 'rpc', 'rma.h': 'rma', 'endpoint.h': 'endpoint', 'transport.h': 'transport',
    'sim.h': 'transport', 'dpdk.h': 'transport', 'verbs.h': 'transport', 'wire.h': 'transport',
    'cc.h': 'cc',
}
ALLOWED_CIRCLES = set()
bad = []

for layer in LAYERS:
    for name in sorted(os.listdir(os.path.join(src, layer))):
        if not name.endswith(('.c', '.h')):
            continue
        path = f'{layer}/{name}'
        text = open(os.path.join(src, path)).read()
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

for layer in ['endpoint', 'rpc', 'rma']:
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

for b in bad:
    print('VIOLATION:', b)
sys.exit(1 if bad else 0)
