"""The OTLP/HTTP receiver behind `tailscope collect`: POST /v1/traces straight into the store.

    app.py       Starlette app: content negotiation, size limits, status codes of the OTLP/HTTP spec
    writer.py    bounded queue of accepted requests and the one writer thread (short transactions)
    protocol.py  request decoding dispatch and the spec's response bodies (protobuf or JSON)
    limits.py    size limits and bounded decompression
    server.py    uvicorn, graceful shutdown, status line and counters on stderr

A request is acknowledged (200) only after the transaction holding its spans has committed, so an
answered request survives even kill -9; see ARCHITECTURE.md, "Reads while writing".
"""
