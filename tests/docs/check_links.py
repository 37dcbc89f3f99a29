#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown: every [text](target) and ![alt](target) in
README.md, docs/*.md and bench/**/README.md whose target is a file of this repository must exist,
and a #anchor must be a heading of the target file (GitHub's slugs). Usage: check_links.py [ROOT]
[--ignore PATH ...] (paths relative to ROOT that may be missing, e.g. pages still to be written)."""
import argparse
import glob
import os
import re
import sys
import unicodedata

LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')


def strip_code(text):
    """The text without fenced code blocks and inline code spans (links there are not links)."""
    out, fence = [], None
    for line in text.split('\n'):
        m = re.match(r'^\s*(`{3,}|~{3,})', line)
        if fence:
            if m and line.strip().startswith(fence):
                fence = None
            out.append('')
            continue
        if m:
            fence = m.group(1)
            out.append('')
            continue
        out.append(re.sub(r'`+[^`]*`+', '', line))
    return '\n'.join(out)


def slug(heading):
    """GitHub's anchor for a heading: lowercase, punctuation and symbols dropped, spaces to '-'."""
    h = re.sub(r'<[^>]+>', '', heading).strip().lower()
    keep = []
    for ch in h:
        cat = unicodedata.category(ch)
        if ch in ' -_' or cat[0] in 'LN' or cat == 'Mn':
            keep.append(ch)
    return ''.join(keep).replace(' ', '-')


def anchors(path):
    seen, result = {}, set()
    fence = None
    for line in open(path, encoding='utf-8'):
        m = re.match(r'^\s*(`{3,}|~{3,})', line)
        if fence:
            if m and line.strip().startswith(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        h = re.match(r'^#{1,6}\s+(.*?)\s*#*\s*$', line)
        if h:
            s = slug(h.group(1))
            n = seen.get(s, 0)
            seen[s] = n + 1
            result.add(s if n == 0 else f'{s}-{n}')
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('root', nargs='?', default=os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
    ap.add_argument('--ignore', nargs='*', default=[])
    a = ap.parse_args()
    root = os.path.realpath(a.root)
    ignore = {os.path.normpath(p) for p in a.ignore}
    files = ['README.md'] + sorted(glob.glob('docs/*.md', root_dir=root)) + \
        sorted(glob.glob('bench/**/README.md', root_dir=root, recursive=True))
    bad, count = [], 0
    cache = {}
    for f in files:
        text = strip_code(open(os.path.join(root, f), encoding='utf-8').read())
        for lineno, line in enumerate(text.split('\n'), 1):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
                    continue  # http:, https:, mailto:
                count += 1
                path, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                if os.path.relpath(os.path.join(root, dest), root).startswith('..'):
                    bad.append(f'{f}:{lineno}: {target}: outside the repository')
                    continue
                if dest in ignore:
                    continue
                full = os.path.join(root, dest)
                if not os.path.exists(full):
                    bad.append(f'{f}:{lineno}: {target}: no such file {dest}')
                    continue
                if anchor:
                    if not dest.endswith('.md'):
                        bad.append(f'{f}:{lineno}: {target}: an anchor into a file that is not Markdown')
                        continue
                    if dest not in cache:
                        cache[dest] = anchors(full)
                    if anchor not in cache[dest]:
                        bad.append(f'{f}:{lineno}: {target}: no heading #{anchor} in {dest}')
    for b in bad:
        print(b)
    print(f'{len(files)} files, {count} relative links, {len(bad)} broken')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
