"""Input files of the offline commands, gunzipped when their content is gzip (by the magic,
whatever the name; zstd likewise), the decompressed bytes bounded as ``read_body`` bounds an
HTTP body's: a small gzip bomb (1 MB on disk, 1 GB inflated) is cut off at
``MAX_GUNZIPPED_BYTES`` with ``TooLarge``, never inflated into memory whole."""

from __future__ import annotations

import gzip
import io
import mmap
from pathlib import Path
from typing import IO

GZIP_MAGIC = b"\x1f\x8b"
# A zstd frame's first bytes: the collector file exporter's only compression (``compression:
# zstd``) starts each request it writes with one (after the request's 4-byte size), or the
# file with one (its ``exporter.file.nativeCompression`` feature gate: the file one stream).
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# Most bytes a gzip input file may decompress to (1 GiB): past what one offline run can
# parse anyway (a JSON document takes ~10 times its size in memory); a larger file is
# refused, naming it (gunzip it first to read it as a plain file).
MAX_GUNZIPPED_BYTES = 1 << 30


class TooLarge(ValueError):
    """A gzip or zstd file that decompresses past the limit (the caller names the file)."""


class ZstdError(ValueError):
    """zstd content that does not decompress (cut short, corrupt); the caller names the file."""


class _Bounded(io.RawIOBase):
    """A gzip stream that raises ``TooLarge`` once more than ``limit`` bytes come out."""

    def __init__(self, inner: gzip.GzipFile, limit: int) -> None:
        self._inner, self._limit, self._read = inner, limit, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        with memoryview(buffer) as view:
            # at most one byte past the limit: enough to see it passed
            want = min(len(view), self._limit + 1 - self._read)
            data = self._inner.read(max(want, 1))
            self._read += len(data)
            if self._read > self._limit:
                raise TooLarge(f"gzip content decompresses past the limit of {self._limit} "
                               "bytes (gunzip it to read it as a plain file)")
            view[:len(data)] = data
            return len(data)

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def _magic(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(4)


def open_binary(path: Path, limit: int | None = None) -> IO[bytes]:
    """The file's content as a stream, gunzipped when it starts with the gzip magic (at
    most ``limit`` bytes, ``MAX_GUNZIPPED_BYTES`` by default; past it a read raises
    ``TooLarge``), or decompressed when it starts with zstd's, as ``read_data`` reads it
    (``unzstd``: one stream or a frame after another, bounded the same; ``TooLarge`` or
    ``ZstdError`` raised here). A plain file is opened as it is."""
    magic = _magic(path)
    if magic == ZSTD_MAGIC:
        return io.BytesIO(unzstd(path.read_bytes(), limit))
    if magic[:2] != GZIP_MAGIC:
        return path.open("rb")
    bound = MAX_GUNZIPPED_BYTES if limit is None else limit
    return io.BufferedReader(_Bounded(gzip.GzipFile(path, "rb"), bound))


def open_text(path: Path, limit: int | None = None) -> IO[str]:
    """``open_binary`` as UTF-8 text, without a byte order mark (as ``read_bytes``)."""
    return io.TextIOWrapper(open_binary(path, limit), encoding="utf-8-sig")


def unzstd(data: bytes, limit: int | None = None) -> bytes:
    """zstd ``data`` (its frames, one after the other) decompressed, at most ``limit`` bytes
    (``MAX_GUNZIPPED_BYTES`` by default; ``TooLarge`` past it, ``ZstdError`` when it does
    not decompress). The decoder writes into a buffer of that size, an anonymous mapping
    whose pages are memory only once written, and stops when it is full: a zstd bomb is cut
    off at the limit, never inflated whole."""
    import cramjam  # the lock's zstd (also aiokafka's codec); imported when a file needs it

    bound = MAX_GUNZIPPED_BYTES if limit is None else limit
    with mmap.mmap(-1, bound + 1) as out:
        try:
            n = cramjam.zstd.decompress_into(data, out)
        except cramjam.DecompressionError as e:
            if "whole buffer" in str(e):  # the buffer is full: more was coming
                n = bound + 1
            else:
                raise ZstdError(f"zstd content that does not decompress: {e}") from e
        if n > bound:
            raise TooLarge(f"zstd content decompresses past the limit of {bound} bytes "
                           "(zstd -d it to read it as a plain file)")
        return out[:n]


def read_data(data: bytes, limit: int | None = None) -> bytes:
    """``data`` (a file's content) gunzipped when it starts with the gzip magic, or
    decompressed when it starts with zstd's (``unzstd``), at most ``limit`` bytes
    (``TooLarge`` past it); else ``data`` itself."""
    if data[:4] == ZSTD_MAGIC:
        return unzstd(data, limit)
    if data[:2] != GZIP_MAGIC:
        return data
    bound = MAX_GUNZIPPED_BYTES if limit is None else limit
    with _Bounded(gzip.GzipFile(fileobj=io.BytesIO(data)), bound) as stream:
        out = bytearray()
        while True:
            piece = stream.read(1 << 20)
            if not piece:
                return bytes(out)
            out += piece
