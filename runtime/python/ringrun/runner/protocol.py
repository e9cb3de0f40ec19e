"""What ``ringrun.run``'s driver and its ranks say to each other.

A rank makes two short TCP connections to the port the driver listens on, at the host of
``RINGRUN_STORE_ADDR`` (the host ringrun runs on, which is the driver's): one to fetch the function,
one to hand back what it returned. On each, both sides first prove they hold the job's secret
(``SECRET_VARIABLE``: 64 hex digits the driver makes, passed to the ranks as ``ringrun -x`` passes
a variable, never on a command line), so nothing is unpickled from a stranger. Then each message is
an 8-byte length and a pickle.
"""

import hashlib
import hmac
import os
import pickle
import struct

from ringrun._ringrun import variables as _variables

SECRET_VARIABLE = _variables.RUN_SECRET  # ringrun(1), ENVIRONMENT

_NONCE_BYTES = 32
_LENGTH = struct.Struct("!Q")


def _recv_exact(sock, count):
    buf = bytearray(count)
    view = memoryview(buf)
    got = 0
    while got < count:
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("ringrun.run: the other side closed the connection mid-message")
        got += n
    return bytes(buf)


def send_message(sock, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_LENGTH.pack(len(data)))
    sock.sendall(data)


def recv_message(sock):
    (length,) = _LENGTH.unpack(_recv_exact(sock, _LENGTH.size))
    return pickle.loads(_recv_exact(sock, length))


def _proof(secret, role, nonce):
    return hmac.new(secret, role + nonce, hashlib.sha256).digest()


def prove_rank(sock, secret):
    """The driver's side: the rank must answer this side's challenge, then gets its own answered."""
    challenge = os.urandom(_NONCE_BYTES)
    sock.sendall(challenge)
    theirs = _recv_exact(sock, _NONCE_BYTES)
    if not hmac.compare_digest(_recv_exact(sock, 32), _proof(secret, b"rank", challenge)):
        raise PermissionError("ringrun.run: a connection did not prove the job's secret")
    sock.sendall(_proof(secret, b"driver", theirs))


def prove_driver(sock, secret):
    """The rank's side of prove_rank."""
    challenge = _recv_exact(sock, _NONCE_BYTES)
    mine = os.urandom(_NONCE_BYTES)
    sock.sendall(mine + _proof(secret, b"rank", challenge))
    if not hmac.compare_digest(_recv_exact(sock, 32), _proof(secret, b"driver", mine)):
        raise PermissionError("ringrun.run: the driver did not prove the job's secret")
