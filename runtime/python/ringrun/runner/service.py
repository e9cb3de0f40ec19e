"""The driver's end of ``ringrun.run``: a listener that hands every rank the function and keeps
what each returned (protocol.py says how they talk)."""

import socket
import threading

from ringrun.runner import protocol

# A rank that connected has this long to prove the secret and to send its request.
_HANDSHAKE_SECONDS = 60


class Outcome:
    """What one rank reported: ``rank`` and ``size`` of its world when its function ended, and
    either ``value`` (the pickled return value, bytes) or ``error`` (``'ValueError: ...'``)."""

    def __init__(self, rank, size, value=None, error=None):
        self.rank, self.size, self.value, self.error = rank, size, value, error


class FunctionService:
    """Listens on ``bind_host`` (an ephemeral port: ``port``) until close(). ``payload`` is the
    message a rank's fetch gets; ``outcomes`` lists what ranks reported, in arrival order."""

    def __init__(self, payload, secret, bind_host):
        self._payload = payload
        self._secret = secret
        self._lock = threading.Lock()
        self.outcomes = []
        self._listener = socket.create_server((bind_host, 0), backlog=128)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, name="ringrun.run service", daemon=True)
        self._thread.start()

    def close(self):
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._thread.join(timeout=5)

    def snapshot(self):
        with self._lock:
            return list(self.outcomes)

    def _accept(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(conn,), name="ringrun.run rank", daemon=True).start()

    def _serve(self, conn):
        with conn:
            try:
                conn.settimeout(_HANDSHAKE_SECONDS)
                protocol.prove_rank(conn, self._secret)
                request = protocol.recv_message(conn)
                if request == ("fetch",):
                    protocol.send_message(conn, self._payload)
                elif isinstance(request, tuple) and len(request) == 5 and request[0] == "outcome":
                    _, rank, size, value, error = request
                    with self._lock:
                        self.outcomes.append(Outcome(rank, size, value, error))
                    protocol.send_message(conn, ("ok",))
            except Exception:  # noqa: BLE001 -- a stranger, or a rank that died mid-message: its exit tells
                return  # the driver the rest
