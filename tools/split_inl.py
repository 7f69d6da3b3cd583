#!/usr/bin/env python3
"""Moves the bodies of a header's non-template `inline` functions into its -inl.hpp file.

    tools/split_inl.py include/reel/core/print.hpp [name ...]

Each top-level `inline <signature> {` ... `}` definition (or only those named) becomes a
`REEL_INLINE <signature>;` declaration in the header (default arguments stay there) and a
`REEL_INLINE <signature> { ... }` definition in X-inl.hpp (default arguments removed), inside the
same namespace. The header includes X-inl.hpp at its end unless REEL_COMPILED_LIB is defined;
src/runtime.cpp includes it in compiled mode (include/reel/core/config.hpp). Functions that must
stay inline (tiny accessors on hot paths) are simply not named.
"""
import os
import re
import sys


def split_params(s):
    out, depth, cur = [], 0, ''
    for ch in s:
        if ch in '(<[{':
            depth += 1
        elif ch in ')>]}':
            depth -= 1
        if ch == ',' and depth == 0:
            out.append(cur)
            cur = ''
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out


def strip_defaults(sig):
    # the outermost parameter list: from the first '(' after the name to its match
    m = re.search(r'[\w:~]+\s*\(', sig)
    start = sig.index('(', m.start())
    depth = 0
    for i in range(start, len(sig)):
        if sig[i] == '(':
            depth += 1
        elif sig[i] == ')':
            depth -= 1
            if depth == 0:
                end = i
                break
    params = split_params(sig[start + 1:end])
    fixed = []
    for p in params:
        d, q = 0, None
        for i, ch in enumerate(p):
            if ch in '(<[{':
                d += 1
            elif ch in ')>]}':
                d -= 1
            elif ch == '=' and d == 0:
                q = i
                break
        fixed.append(p[:q].rstrip() if q is not None else p)
    return sig[:start + 1] + ','.join(fixed) + sig[end:]


def main():
    path = sys.argv[1]
    only = set(sys.argv[2:])
    lines = open(path).read().split('\n')
    ns_stack = []  # (namespace line, depth at open)
    depth = 0
    out, moved = [], []  # moved: (namespace line, text)
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r'^namespace ([\w:]+(?:::inline [\w:]+)?[\w:]*)\s*\{', line)
        is_fn = (line.startswith('inline ') and not line.startswith('inline constexpr') and
                 re.match(r'^inline [^=;]*\(', line) and not (i > 0 and lines[i - 1].startswith('template')))
        if is_fn and depth == len(ns_stack):
            # collect the signature up to the line ending in '{'
            j = i
            while not lines[j].rstrip().endswith(('{', ';', '}')):
                j += 1
            sig = '\n'.join(lines[i:j + 1])
            name = re.search(r'([\w~]+)\s*\(', sig).group(1)
            if lines[j].rstrip().endswith('{') and (not only or name in only) and ' = delete' not in sig:
                # body to the closing brace at column 0
                k = j + 1
                while lines[k] != '}':
                    k += 1
                body = lines[j + 1:k]
                decl = 'REEL_INLINE ' + sig[len('inline '):].rstrip()[:-1].rstrip() + ';'
                defn = 'REEL_INLINE ' + strip_defaults(sig[len('inline '):])
                if '::' not in name and not re.search(r'[\w>]+::' + re.escape(name) + r'\s*\(', sig):
                    out.extend(decl.split('\n'))  # (a member defined outside its class is declared in it)
                moved.append((tuple(n for n, _ in ns_stack), '\n'.join([defn] + body + ['}'])))
                i = k + 1
                continue
        if m:
            ns_stack.append((line, depth))
        depth += line.count('{') - line.count('}')
        while ns_stack and depth <= ns_stack[-1][1]:
            ns_stack.pop()
        out.append(line)
        i += 1
    if not moved:
        print('nothing moved from', path)
        return
    base = os.path.basename(path)[:-4]
    inl = os.path.join(os.path.dirname(path), base + '-inl.hpp')
    text = ['#pragma once', '// The bodies of %s\'s non-template runtime functions (header-only mode: included by' % base +
            ' it;', '// compiled mode: by src/runtime.cpp).', '#include "%s.hpp"' % base, '']
    cur = None
    for ns, body in moved:
        if ns != cur:
            if cur is not None:
                text.extend(['}  // namespace'] * len(cur) + [''])
            text.extend(ns)
            cur = ns
        text.append(body)
        text.append('')
    text.extend(['}  // namespace'] * len(cur))
    open(inl, 'w').write('\n'.join(text) + '\n')
    while out and out[-1] == '':
        out.pop()
    out += ['', '#ifndef REEL_COMPILED_LIB', '#include "%s-inl.hpp"' % base, '#endif', '']
    open(path, 'w').write('\n'.join(out))
    print('moved', len(moved), 'functions to', inl)


main()
