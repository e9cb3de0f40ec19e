#!/usr/bin/env python3
"""A rank's side of elastic mode's store keys for tests whose ranks do not use the runtime.

    elastic_store.py get KEY [TIMEOUT_MS]   print the value (0: only if set now); exit 1 when unset
    elastic_store.py set KEY VALUE

Talks the store's wire protocol (runtime/store/ringrun/store.hpp) to RINGRUN_STORE_ADDR with
RINGRUN_JOB_SECRET, as the runtime's store::Client does. Bytes outside printable ASCII are
printed as \\xNN (the tombstone is \\x1f!reset).
"""
import os
import socket
import struct
import sys

MAGIC = 0x31535252  # "RRS1"
HELLO, SET, GET = 1, 2, 3
STATUS_OK, STATUS_VALUE, STATUS_NOT_FOUND = 0, 1, 2


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            sys.exit("elastic_store.py: the store closed the connection")
        data += chunk
    return data


def request(sock, kind, key=b"", value=b"", timeout_ms=0):
    sock.sendall(struct.pack("<IBBHII", MAGIC, kind, 0, len(key), len(value), timeout_ms) + key + value)
    _, _, status, _, value_len, _ = struct.unpack("<IBBHII", recv_exact(sock, 16))
    return status, recv_exact(sock, value_len)


def main():
    host, port = os.environ["RINGRUN_STORE_ADDR"].rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=120)
    request(sock, HELLO, value=os.environ["RINGRUN_JOB_SECRET"].encode())
    op, key = sys.argv[1], sys.argv[2].encode()
    if op == "set":
        request(sock, SET, key, sys.argv[3].encode())
        return 0
    status, value = request(sock, GET, key, timeout_ms=int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    if status != STATUS_VALUE:
        return 1
    print("".join(chr(b) if 32 <= b < 127 else "\\x%02x" % b for b in value))
    return 0


if __name__ == "__main__":
    sys.exit(main())
