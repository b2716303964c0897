"""The model process's side of the hand-off: messages read in chunks, answers written per batch, and a
batcher that wakes its worker and the event loop once per batch rather than once per request (issue
28: on a GPU the model process's Python per request bounds the scaled-out service)."""

from __future__ import annotations

import asyncio
import threading

from reference_pipeline.batcher import DynamicBatcher
from reference_pipeline.handoff import _Answers, frame, read_frames


def test_read_frames_reassembles_messages_split_anywhere() -> None:
    messages = [[0, i, list(range(i)), "x" * (i * 37)] for i in range(40)]
    stream = b"".join(frame(m) for m in messages)

    async def read(cut: int) -> list:
        reader = asyncio.StreamReader()
        for start in range(0, len(stream), cut):  # arrives in pieces of `cut` bytes
            reader.feed_data(stream[start : start + cut])
        reader.feed_eof()
        return [m async for m in read_frames(reader, chunk=cut)]

    for cut in (1, 3, 7, 64, 1000, len(stream)):
        assert asyncio.run(read(cut)) == messages


def test_answers_of_one_loop_turn_go_out_in_one_write() -> None:
    class Writer:
        def __init__(self) -> None:
            self.writes: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.writes.append(data)

        def is_closing(self) -> bool:
            return False

    async def answer() -> Writer:
        writer = Writer()
        answers = _Answers(writer)  # type: ignore[arg-type]
        for rid in range(5):
            answers.add([rid, [0.5]])
        await asyncio.sleep(0)
        answers.add([5, [0.5]])
        await asyncio.sleep(0)
        return writer

    writer = asyncio.run(answer())
    assert writer.writes == [b"".join(frame([rid, [0.5]]) for rid in range(5)), frame([5, [0.5]])]


def test_a_full_batch_wakes_the_worker_once_and_the_loop_once(monkeypatch) -> None:
    handed_back: list[int] = []
    notified: list[int] = []
    release = threading.Event()

    def run_batch(payloads: list, marks: dict) -> list:
        release.wait(5)
        return [p * 2 for p in payloads]

    async def scenario() -> tuple[list, int]:
        loop = asyncio.get_running_loop()
        original = loop.call_soon_threadsafe

        def counting(callback, *args):
            handed_back.append(len(args[0]) if args and isinstance(args[0], list) else 1)
            return original(callback, *args)

        monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
        batcher = DynamicBatcher(run_batch, max_batch=8, max_wait_ms=10_000, workers=1)
        notify = batcher._cond.notify

        def counting_notify(n: int = 1) -> None:
            notified.append(n)
            notify(n)

        monkeypatch.setattr(batcher._cond, "notify", counting_notify)
        futures = [batcher.submit(i) for i in range(8)]
        release.set()
        results = await asyncio.wait_for(asyncio.gather(*futures), 5)
        wakeups = len(notified)
        batcher.close()
        return [r.output for r in results], wakeups

    outputs, wakeups = asyncio.run(scenario())
    assert outputs == [i * 2 for i in range(8)]
    assert handed_back == [8]  # one hand-back carrying the batch's 8 results
    assert wakeups == 2  # the first request (start the deadline) and the full batch


def test_front_ends_get_a_socket_each_and_the_kernel_spreads_connections() -> None:
    import socket

    from reference_pipeline.serving import bind_port_group

    group = bind_port_group(count=2)
    try:
        assert len({s.fileno() for s in group}) == 2
        port = group[0].getsockname()[1]
        assert group[1].getsockname()[1] == port
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(64)]
        accepted = []
        for sock in group:
            sock.setblocking(False)
            count = 0
            while True:
                try:
                    conn, _ = sock.accept()
                except BlockingIOError:
                    break
                conn.close()
                count += 1
            accepted.append(count)
        for client in clients:
            client.close()
        # by a hash of each connection's source port: all 64 on one socket has odds of 2**-63
        assert sum(accepted) == 64 and min(accepted) > 0
    finally:
        for sock in group:
            sock.close()


def test_a_port_in_use_is_refused_not_shared() -> None:
    import pytest

    from reference_pipeline.serving import bind_port_group

    first = bind_port_group(count=2)
    try:
        with pytest.raises(OSError):
            bind_port_group(port=first[0].getsockname()[1], count=2)
    finally:
        for sock in first:
            sock.close()
