"""Replaces a section of a markdown document with a generated one.

python3 tests/gpu/doc-section.py DOC SECTION_MD

SECTION_MD starts with its heading (`## Title`); in DOC, everything from that heading to
the next heading of the same level (or the end) is replaced by it, or it is appended when
DOC has no such heading. The GPU scripts write their sections this way
(tests/gpu/engines.sh: docs/gpu-validation.md's "Engines").
"""
import re
import sys

doc, section = sys.argv[1:3]
text, new = open(doc).read(), open(section).read()
heading = new.splitlines()[0]
level = len(heading) - len(heading.lstrip("#"))
if level == 0:
    sys.exit(f"{section}: the first line is not a markdown heading: {heading!r}")
hashes = "#" * level
m = re.search(rf"^{re.escape(heading)}\n.*?(?=^{hashes} (?!#)|\Z)", text, flags=re.S | re.M)
text = text[: m.start()] + new.rstrip("\n") + "\n\n" + text[m.end():].lstrip("\n") if m else text.rstrip("\n") + "\n\n" + new
open(doc, "w").write(text.rstrip("\n") + "\n")
