#!/usr/bin/env python3
"""Extracts one of Jane Austen's novels from Debian's r-cran-janeaustenr package as plain
text: how data/emma.txt was made (data/README.md says why this source).

    apt-get download r-cran-janeaustenr && dpkg -x r-cran-janeaustenr_*.deb pkg
    python3 scripts/extract_austen_text.py pkg/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb emma > data/emma.txt

The package keeps its data in R's lazy-load database: consecutive records of a 4-byte
big-endian length and a zlib stream, each stream an R object serialized in XDR format
(`serialize()`, version 2 or 3). Each novel is a character vector, one element per line;
this reads the vectors (nothing else in the file is one), picks the novel whose first line
names it, and writes its lines joined by newlines, ending with one.
"""
import struct
import sys
import zlib

STRSXP, CHARSXP, UTF8_MASK = 16, 9, 1 << 15


def records(data):
    """The decompressed records of a lazy-load database, in file order."""
    pos = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        stream = zlib.decompressobj()
        raw = stream.decompress(data[pos + 4 :])
        if len(raw) != length:
            raise ValueError(f"record at {pos}: {len(raw)} bytes, header says {length}")
        pos = len(data) - len(stream.unused_data)
        yield raw


def character_vector(raw):
    """The lines of a serialized character vector, or None for any other object."""
    if raw[:2] != b"X\n":
        raise ValueError("not an XDR serialization")
    pos = 2

    def int32():
        nonlocal pos
        (value,) = struct.unpack(">i", raw[pos : pos + 4])
        pos += 4
        return value

    version = int32()
    int32(), int32()  # the writer's R version, the oldest R that reads it
    if version == 3:
        name_length = int32()  # the native encoding's name follows
        pos += name_length
    if int32() & 0xFF != STRSXP:
        return None
    lines = []
    for _ in range(int32()):
        flags, length = int32(), int32()
        if flags & 0xFF != CHARSXP:
            raise ValueError("a character vector holds a non-string")
        if length == -1:
            continue  # NA
        encoding = "utf-8" if flags & UTF8_MASK else "latin-1"
        lines.append(raw[pos : pos + length].decode(encoding))
        pos += length
    return lines


def main():
    path, title = sys.argv[1], sys.argv[2].upper()
    for raw in records(open(path, "rb").read()):
        lines = character_vector(raw)
        if lines and lines[0].strip().upper() == title:
            sys.stdout.write("\n".join(lines) + "\n")
            return
    sys.exit(f"no novel titled {title!r} in {path}")


if __name__ == "__main__":
    main()
