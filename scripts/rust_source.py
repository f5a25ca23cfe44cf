"""Rust source as the layer and graph checks read it: code only.

Shared by scripts/check-layers.sh and scripts/check-graph.sh, which import
it; comments, doc comments (and so intra-doc links) and string and char
literals are text for readers, not dependencies.
"""

import re

RAW_STR = re.compile(r'(?<![\w])[bc]?r(#*)"')
PLAIN_STR = re.compile(r'(?<![\w])[bc]?"')
CHAR_LIT = re.compile(r"'(?:\\.[^'\\\n]{0,9}|[^'\\])'", re.S)


def blank_literals_and_comments(src):
    """The source with comments, string and char literals replaced by
    spaces (newlines kept, so line numbers stay right)."""
    out = []
    i, n = 0, len(src)

    def blank(text):
        return re.sub(r"[^\n]", " ", text)

    while i < n:
        c = src[i]
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(src[i:j]))
            i = j
        elif c == "/" and src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(src[i:j]))
            i = j
        elif c in "bcr\"":
            raw = RAW_STR.match(src, i) if c != '"' else None
            plain = None if raw else PLAIN_STR.match(src, i)
            if raw:
                end = '"' + raw.group(1)
                j = src.find(end, raw.end())
                j = n if j < 0 else j + len(end)
                out.append(blank(src[i:j]))
                i = j
            elif plain:
                j = plain.end()
                while j < n and src[j] != '"':
                    j += 2 if src[j] == "\\" else 1
                out.append(blank(src[i:j + 1]))
                i = j + 1
            else:
                out.append(c)
                i += 1
        elif c == "'":
            # A char literal ('x', '\n', '\'', '\u{1F600}'), else a lifetime.
            m = CHAR_LIT.match(src, i)
            if m:
                out.append(blank(m.group(0)))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)
