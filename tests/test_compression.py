"""The bounded zstd reader: a read decompresses up to the first frame end past what it asked for,
not every frame in the compressed chunk it holds (a bomb of many small frames stays cheap)."""

from __future__ import annotations

import io

import zstandard

from ingest.compression import _ZstdFrames

FRAME = 16 << 20  # 16 MiB of zeros: about 500 compressed bytes, so one 16 KiB feed holds ~30 frames


def test_a_read_stops_at_the_first_frame_end_past_its_size() -> None:
    frame = zstandard.ZstdCompressor(level=3).compress(bytes(FRAME))
    assert 8 * len(frame) < _ZstdFrames.FEED
    reader = _ZstdFrames(io.BytesIO(frame * 64))
    assert reader.read(1 << 20) == bytes(1 << 20)
    # one frame decompressed, not the ~30 the first feed holds (was ~500 MiB buffered, copied per read)
    assert len(reader._out) == FRAME - (1 << 20)
    assert reader.read(FRAME) == bytes(FRAME)  # the rest of the first frame and 1 MiB of the second
    assert len(reader._out) == FRAME - (1 << 20)


def test_every_frame_is_read_to_the_end() -> None:
    frames = [zstandard.ZstdCompressor().compress(bytes([i]) * (300_000 + i)) for i in range(40)]
    reader = _ZstdFrames(io.BytesIO(b"".join(frames)))
    out = bytearray()
    while chunk := reader.read(100_000):
        out += chunk
    assert out == b"".join(bytes([i]) * (300_000 + i) for i in range(40))


def test_a_truncated_last_frame_is_still_an_error() -> None:
    data = zstandard.ZstdCompressor().compress(b"x" * 100_000)
    reader = _ZstdFrames(io.BytesIO(data * 3 + data[:-20]))
    try:
        while reader.read(1 << 16):
            pass
    except zstandard.ZstdError as error:
        assert "truncated" in str(error)
    else:
        raise AssertionError("a truncated zstd frame was read without an error")
