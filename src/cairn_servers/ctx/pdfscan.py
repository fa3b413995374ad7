"""A PDF's structure, checked before PDFium parses it: pages, streams, operators and form XObjects.

PDFium decompresses a page's content streams whole and builds an object for every operator on the
page, expanding form XObjects where they are drawn; a few kilobytes can ask it for gigabytes (a
1 GB Flate stream, five million ``Tj``, two forms that draw each other). :func:`check` reads the
file the way PDFium will, but only counting, and raises :class:`~cairn_servers.ctx.extract.Skipped`
(naming the limit) for a document past one:

* ``PDF_PAGES``: pages in the page tree;
* ``PDF_STREAM_MB``: any stream PDFium decodes to read text (contents, forms, fonts, object streams)
  once decompressed; images are left alone (text extraction never decodes them);
* ``PDF_OPERATORS``: operators on one page, each form counted every time it is drawn;
* ``PDF_FORM_DEPTH``: forms drawn inside forms; a form that draws itself, through any others, is a cycle.

Decompression is streamed (1 MiB at a time) and nothing decompressed is kept. What this reader cannot
follow (an encrypted stream, a filter other than Flate, a damaged file PDFium would repair) is left
to PDFium, under the worker's memory and CPU limits, which stay the backstop.
"""

from __future__ import annotations

import re
import zlib
from collections import Counter
from typing import Any

from cairn_servers.ctx import extract as ex

_OBJ = re.compile(rb"(?<![0-9])([0-9]{1,10})[ \t\r\n\f\x00]+([0-9]{1,5})[ \t\r\n\f\x00]+obj\b")
_ROOT = re.compile(rb"/Root[ \t\r\n\f\x00]*([0-9]{1,10})[ \t\r\n\f\x00]+([0-9]{1,5})[ \t\r\n\f\x00]+R")
_WS = b" \t\r\n\f\x00"
_DELIM = b"()<>[]{}/%"
# An operator: a bare word that does not continue a number, a name or another word.
# An operator: a word after whitespace or the end of an operand (a name, a number or a word inside
# a string also starts after whitespace, but never with these characters after a slash or a digit;
# words inside strings are counted too, which only makes the count larger). Measured 18-26 MB/s.
_OPERATOR = re.compile(rb"[ \t\r\n\f\x00\])>][A-Za-z'\"]")
_DO = re.compile(rb"/([^ \t\r\n\f\x00()<>\[\]{}/%]+)[ \t\r\n\f\x00]+Do(?![\w])")
MAX_NESTING = 64  # arrays and dictionaries inside each other, in one object
MAX_OBJECTS = 1_000_000  # objects indexed (~100 MB); a file with more is left to PDFium and the limits


class _Unreadable(Exception):
    """Something this reader does not follow: the rest is PDFium's (under the worker's limits)."""


class Ref(tuple):  # type: ignore[type-arg]
    """An indirect reference ``n g R``."""


class Stream:
    def __init__(self, num: int, meta: dict[bytes, Any], start: int) -> None:
        self.num, self.meta, self.start = num, meta, start


def check(data: bytes) -> None:
    """Raise Skipped when ``data`` (a PDF) is past one of the limits; return when it is not, or when
    its structure is beyond this reader (PDFium then reads it under the worker's limits)."""
    try:
        _Scan(data).run()
    except (_Unreadable, RecursionError, ValueError, IndexError, KeyError, TypeError):
        return


class _Scan:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.view = memoryview(data)
        self.offsets: dict[int, int] = {}
        for m in _OBJ.finditer(data):  # later definitions win, as incremental updates do
            self.offsets[int(m.group(1))] = m.end()
            if len(self.offsets) > MAX_OBJECTS:
                raise _Unreadable
        self.in_streams: dict[int, tuple[int, int]] | None = None  # objects inside object streams, on demand
        self.cache: dict[int, Any] = {}
        self.sizes: dict[int, int] = {}  # stream -> operators (content) or 0 (checked)
        self.draws: dict[int, Counter[bytes]] = {}
        self.cost: dict[int, int] = {}
        self.page = 0  # the page being checked, for messages
        self._last: tuple[int, tuple[bytes, list[tuple[int, int]], int]] | None = None

    # ---- objects -------------------------------------------------------------------------------

    def get(self, value: Any) -> Any:
        """``value`` with references followed (one level: a reference to a reference is followed too)."""
        hops = 0
        while isinstance(value, Ref):
            value = self.obj(value[0])
            hops += 1
            if hops > 8:
                raise _Unreadable
        return value

    def obj(self, num: int) -> Any:
        if num in self.cache:
            return self.cache[num]
        self.cache[num] = None  # a reference back to itself reads as null
        try:
            value = self._read(num)
        except (_Unreadable, ValueError, IndexError, TypeError):
            value = None  # one object this reader cannot follow: the others are still checked
        self.cache[num] = value
        return value

    def _read(self, num: int) -> Any:
        if num in self.offsets:
            value, pos = _parse(self.data, self.offsets[num], 0)
            pos = _skip(self.data, pos)
            if isinstance(value, dict) and self.data.startswith(b"stream", pos):
                pos += 6
                if self.data.startswith(b"\r\n", pos):
                    pos += 2
                elif self.data.startswith(b"\n", pos) or self.data.startswith(b"\r", pos):
                    pos += 1
                value = Stream(num, value, pos)
        else:
            value = self._from_object_stream(num)
        return value

    def _from_object_stream(self, num: int) -> Any:
        if self.in_streams is None:
            self.in_streams = {}
            for snum, off in list(self.offsets.items()):
                if self.data.find(b"/ObjStm", off, off + 400) < 0:
                    continue
                try:
                    entries = self._unpacked(snum)[1]
                except (_Unreadable, ValueError, IndexError, TypeError):
                    continue
                for i, (inner, _) in enumerate(entries):
                    self.in_streams.setdefault(inner, (snum, i))
        where = self.in_streams.get(num)
        if where is None:
            return None
        text, entries, first = self._unpacked(where[0])
        return _parse(text, first + entries[where[1]][1], 0)[0]

    def _unpacked(self, snum: int) -> tuple[bytes, list[tuple[int, int]], int]:
        """An object stream's text, its (object, offset) pairs and /First; the last one read is kept."""
        if self._last is not None and self._last[0] == snum:
            return self._last[1]
        stream = self.obj(snum)
        if not isinstance(stream, Stream) or stream.meta.get(b"Type") != b"ObjStm":
            return b"", [], 0
        n, first = int(self.get(stream.meta.get(b"N"))), int(self.get(stream.meta.get(b"First")))
        text = b"".join(self.decoded(stream))
        header = text[:first].split()
        entries = [(int(header[i]), int(header[i + 1])) for i in range(0, min(len(header), 2 * n) - 1, 2)]
        self._last = (snum, (text, entries, first))
        return self._last[1]

    # ---- streams -------------------------------------------------------------------------------

    def decoded(self, stream: Stream) -> Any:
        """The stream's decompressed bytes, 1 MiB at a time; past PDF_STREAM_MB raises Skipped."""
        filters = self.get(stream.meta.get(b"Filter"))
        if isinstance(filters, list):
            filters = [self.get(f) for f in filters]
        else:
            filters = [filters] if filters is not None else []
        cap = ex.PDF_STREAM_MB << 20
        if not filters:
            length = self.get(stream.meta.get(b"Length"))
            end = stream.start + length if isinstance(length, int) and length >= 0 else self.data.find(
                b"endstream", stream.start)
            if end < 0 or end - stream.start > cap:
                raise _Unreadable if end < 0 else ex.over("PDF_STREAM_MB", f"object {stream.num}")
            yield self.data[stream.start:end]
            return
        if filters != [b"FlateDecode"] and filters != [b"Fl"]:
            raise _Unreadable  # other filters (and chains) are PDFium's, under the worker's limits
        inflater = zlib.decompressobj()
        total = 0
        pos = stream.start
        pending = b""
        while not inflater.eof:
            if not pending:
                if pos >= len(self.data):
                    break
                pending = bytes(self.view[pos: pos + (1 << 16)])
                pos += len(pending)
            try:
                out = inflater.decompress(pending, 1 << 20)
            except zlib.error:
                raise _Unreadable from None  # encrypted, or damaged: PDFium's to judge
            pending = inflater.unconsumed_tail
            total += len(out)
            if total > cap:
                raise ex.over("PDF_STREAM_MB", f"object {stream.num}")
            if out:
                yield out

    def content(self, stream: Stream) -> tuple[int, Counter[bytes]]:
        """Operators in a content stream and the names it draws with ``Do`` (each with its count)."""
        if stream.num in self.sizes:
            return self.sizes[stream.num], self.draws[stream.num]
        ops = 0
        draws: Counter[bytes] = Counter()
        carry = b""
        chunks = self.decoded(stream)
        while True:
            try:
                chunk = next(chunks)
            except StopIteration:
                break
            except _Unreadable:  # not Flate, or encrypted: PDFium's, under the worker's limits
                break
            text = carry + chunk
            cut = max(text.rfind(b"\n"), text.rfind(b" "), text.rfind(b"\r"))
            if cut > 0 and len(text) - cut < (1 << 16):
                prev = max(text.rfind(b"\n", 0, cut), text.rfind(b" ", 0, cut), text.rfind(b"\r", 0, cut))
                if text.startswith(b"/", prev + 1):  # "/Name" then (in the next chunk) "Do": keep them together
                    cut = max(prev, 0)
                text, carry = text[:cut], text[cut:]
            else:
                carry = b""
            ops += len(_OPERATOR.findall(text))
            if b"Do" in text:
                draws.update(_DO.findall(text))
            if ops > ex.PDF_OPERATORS:
                raise ex.over("PDF_OPERATORS", f"page {self.page}")
        if carry:
            ops += len(_OPERATOR.findall(carry))
            draws.update(_DO.findall(carry))
        ops += 1  # the first operator has nothing before it
        self.sizes[stream.num], self.draws[stream.num] = ops, draws
        return ops, draws

    # ---- pages and forms -----------------------------------------------------------------------

    def run(self) -> None:
        roots = _ROOT.findall(self.data)
        if not roots:
            raise _Unreadable
        catalog = self.get(Ref((int(roots[-1][0]), int(roots[-1][1]))))
        if not isinstance(catalog, dict):
            raise _Unreadable
        pages: list[tuple[dict[bytes, Any], Any]] = []
        self._pages(catalog.get(b"Pages"), None, pages, set(), 0)
        for self.page, (page, resources) in enumerate(pages, 1):
            ops = 0
            contents = self.get(page.get(b"Contents"))
            for item in contents if isinstance(contents, list) else [contents]:
                stream = self.get(item)
                if not isinstance(stream, Stream):
                    continue
                n, draws = self.content(stream)
                ops += n + self._drawn(draws, resources, [], 1)
                if ops > ex.PDF_OPERATORS:
                    raise ex.over("PDF_OPERATORS", f"page {self.page} (each form counted every time it is drawn)")
        for num, off in list(self.offsets.items()):  # fonts, object streams and the rest PDFium may decode
            at = self.data.find(b"stream", off, off + 4096)
            if at < 0 or self.data.find(b"/Image", off, at) >= 0 or num in self.sizes:
                continue
            try:  # not cached: these are read once, and a file may hold many
                value = self.cache[num] if num in self.cache else self._read(num)
            except (_Unreadable, ValueError, IndexError, TypeError):
                continue
            if isinstance(value, Stream) and value.meta.get(b"Subtype") != b"Image":
                try:
                    for _ in self.decoded(value):
                        pass
                except _Unreadable:
                    continue
                self.sizes[num] = 0

    def _pages(self, node: Any, resources: Any, out: list[tuple[dict[bytes, Any], Any]], seen: set[int],
               depth: int) -> None:
        if depth > MAX_NESTING:
            raise _Unreadable
        if isinstance(node, Ref):
            if node[0] in seen:
                return  # a page tree that loops: PDFium stops there too
            seen.add(node[0])
        node = self.get(node)
        if not isinstance(node, dict):
            return
        resources = node.get(b"Resources", resources)
        kids = self.get(node.get(b"Kids"))
        if isinstance(kids, list) and node.get(b"Type") != b"Page":
            for kid in kids:
                self._pages(kid, resources, out, seen, depth + 1)
            return
        out.append((node, resources))
        if len(out) > ex.PDF_PAGES:
            raise ex.over("PDF_PAGES", "the page tree")

    def _drawn(self, draws: Counter[bytes], resources: Any, stack: list[int], depth: int) -> int:
        """Operators of the forms ``draws`` names, through ``resources``, each counted per drawing."""
        if not draws:
            return 0
        xobjects = self.get(self.get(resources).get(b"XObject")) if isinstance(self.get(resources), dict) else None
        if not isinstance(xobjects, dict):
            return 0
        total = 0
        for name, times in draws.items():
            ref = xobjects.get(_name(name))
            if not isinstance(ref, Ref):
                continue
            total += times * self._form(ref[0], resources, stack, depth)
            if total > ex.PDF_OPERATORS:
                raise ex.over("PDF_OPERATORS", f"page {self.page} (each form counted every time it is drawn)")
        return total

    def _form(self, num: int, resources: Any, stack: list[int], depth: int) -> int:
        if num in stack:
            loop = " → ".join(str(n) for n in [*stack[stack.index(num):], num])
            raise ex.Skipped(f"page {self.page}: form XObjects draw each other (objects {loop}), a loop "
                             "PDFium would expand until memory runs out")
        if num in self.cost:
            return self.cost[num]
        form = self.obj(num)
        if not isinstance(form, Stream) or form.meta.get(b"Subtype") != b"Form":
            return 0
        if depth > ex.PDF_FORM_DEPTH:
            raise ex.over("PDF_FORM_DEPTH", f"page {self.page}, object {num}")
        ops, draws = self.content(form)
        own = form.meta.get(b"Resources")
        cost = ops + self._drawn(draws, own if own is not None else resources, [*stack, num], depth + 1)
        self.cost[num] = cost
        return cost


def _name(raw: bytes) -> bytes:
    """A name as written (``/A#20B``) as the key the parser stores (``A B``)."""
    if b"#" not in raw:
        return raw
    return re.sub(rb"#([0-9A-Fa-f]{2})", lambda m: bytes([int(m.group(1), 16)]), raw)


def _skip(data: bytes, pos: int) -> int:
    n = len(data)
    while pos < n:
        c = data[pos]
        if c in _WS:
            pos += 1
        elif c == 37:  # % comment
            end = data.find(b"\n", pos)
            pos = n if end < 0 else end + 1
        else:
            break
    return pos


_NUMBER = re.compile(rb"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
_REF_TAIL = re.compile(rb"[ \t\r\n\f\x00]+([0-9]{1,5})[ \t\r\n\f\x00]+R(?![A-Za-z])")
_WORD = re.compile(rb"[^ \t\r\n\f\x00()<>\[\]{}/%]*")


def _parse(data: bytes, pos: int, depth: int) -> tuple[Any, int]:
    """One PDF object at ``pos``: dict (name keys, without the slash), list, Ref, bytes name, number,
    string (bytes, undecoded), True/False/None; and the position after it."""
    if depth > MAX_NESTING:
        raise _Unreadable
    pos = _skip(data, pos)
    if pos >= len(data):
        raise _Unreadable
    c = data[pos]
    if data.startswith(b"<<", pos):
        out: dict[bytes, Any] = {}
        pos += 2
        while True:
            pos = _skip(data, pos)
            if data.startswith(b">>", pos):
                return out, pos + 2
            key, pos = _parse(data, pos, depth + 1)
            if not isinstance(key, bytes) or isinstance(key, _Str):
                raise _Unreadable
            value, pos = _parse(data, pos, depth + 1)
            out[key] = value
    if c == 91:  # [
        items: list[Any] = []
        pos += 1
        while True:
            pos = _skip(data, pos)
            if data.startswith(b"]", pos):
                return items, pos + 1
            value, pos = _parse(data, pos, depth + 1)
            items.append(value)
    if c == 47:  # /Name
        m = _WORD.match(data, pos + 1)
        assert m is not None
        return _name(m.group(0)), m.end()
    if c == 40:  # (string)
        level, i = 0, pos
        while i < len(data):
            ch = data[i]
            if ch == 92:
                i += 2
                continue
            if ch == 40:
                level += 1
            elif ch == 41:
                level -= 1
                if level == 0:
                    return _Str(data[pos + 1:i]), i + 1
            i += 1
        raise _Unreadable
    if c == 60:  # <hex>
        end = data.find(b">", pos)
        if end < 0:
            raise _Unreadable
        return _Str(data[pos + 1:end]), end + 1
    m = _NUMBER.match(data, pos)
    if m:
        text = m.group(0)
        if b"." not in text:
            tail = _REF_TAIL.match(data, m.end())
            if tail:
                return Ref((int(text), int(tail.group(1)))), tail.end()
            return int(text), m.end()
        return float(text), m.end()
    m = _WORD.match(data, pos)
    word = m.group(0) if m else b""
    if not word:
        raise _Unreadable
    return {b"true": True, b"false": False, b"null": None}.get(word, _Str(word)), pos + len(word)


class _Str(bytes):
    """A string (or a keyword), as opposed to a name."""
