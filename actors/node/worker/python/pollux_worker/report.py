"""The report connection: one JSON object per line to POLLUX_REPORT_ADDR.

Reports are measurements: a lost one is harmless, so sending never raises.
A broken connection is closed and re-opened on a later report, no sooner
than a back-off that doubles up to a few seconds. A report that the Go
decoder (actors/node/workerproto Decode) would reject is never sent: in
particular non-finite gradient statistics (a diverging model) are logged
and dropped, as JSON has no NaN.

TLS: when the environment names a CA file (POLLUX_REPORT_CA) the socket is
wrapped with the standard library's ssl module and the listener's
certificate is verified against that CA for the host of the address. A
report token (POLLUX_REPORT_TOKEN), when set, is sent in every report.
"""

import json
import logging
import math
import socket
import ssl
import time

from . import env as envmod

LOG = logging.getLogger("pollux_worker")

MAX_LINE_BYTES = 4096

# The fields of a report, in the order they are written.
FIELDS = ("job", "incarnation", "rank", "step_time", "sync_time", "grad_sqr",
          "grad_var", "epoch", "progress", "local_bsz", "accum_steps")


class ReportError(ValueError):
    """A report outside the protocol's ranges (never sent)."""


def validate(r):
    """Checks r as actors/node/workerproto Report.Validate does.

    Raises ReportError naming the first bad field.
    """
    for k in FIELDS:
        if k not in r:
            raise ReportError("%s is missing" % k)
    for k in ("incarnation", "rank", "epoch", "local_bsz", "accum_steps"):
        if not isinstance(r[k], int) or isinstance(r[k], bool):
            raise ReportError("%s %r is not an integer" % (k, r[k]))
    for k in ("step_time", "sync_time", "grad_sqr", "grad_var", "progress"):
        v = r[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ReportError("%s %r is not a number" % (k, v))
        if math.isnan(v) or math.isinf(v):
            raise ReportError("%s is %r, want a finite number" % (k, v))
        if v < 0:
            raise ReportError("%s is %r, want >= 0" % (k, v))
    if not r["step_time"] > 0:
        raise ReportError("step_time is %r, want > 0" % r["step_time"])
    if r["sync_time"] > r["step_time"]:
        raise ReportError("sync_time %r exceeds step_time %r" %
                          (r["sync_time"], r["step_time"]))
    for k in ("incarnation", "rank", "epoch", "accum_steps"):
        if r[k] < 0:
            raise ReportError("%s %d is negative" % (k, r[k]))
    if r["local_bsz"] <= 0:
        raise ReportError("local_bsz %d, want > 0" % r["local_bsz"])
    if "done" in r and not isinstance(r["done"], bool):
        raise ReportError("done %r is not a boolean" % r["done"])
    if "checkpoint" in r:
        _validate_checkpoint(r["checkpoint"])


def _validate_checkpoint(c):
    """Checks a report's checkpoint (the latest the worker saved) as
    actors/node/workerproto SavedCheckpoint does."""
    if not isinstance(c, dict) or set(c) != {"epoch", "progress",
                                              "saved_at"}:
        raise ReportError("checkpoint %r is not {epoch, progress, saved_at}"
                          % (c,))
    if not isinstance(c["epoch"], int) or isinstance(c["epoch"], bool) or \
            c["epoch"] < 0:
        raise ReportError("checkpoint epoch %r, want an integer >= 0" %
                          (c["epoch"],))
    for k in ("progress", "saved_at"):
        v = c[k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or \
                math.isnan(v) or math.isinf(v) or v < 0:
            raise ReportError("checkpoint %s is %r, want a finite number "
                              ">= 0" % (k, v))
    if not c["saved_at"] > 0:
        raise ReportError("checkpoint saved_at is %r, want > 0" %
                          (c["saved_at"],))


def encode(r, token=None):
    """Returns r as one JSON line (bytes, newline included), validated;
    token, when given, is added as the "token" field."""
    validate(r)
    if token is not None:
        r = dict(r, token=token)
    line = json.dumps(r, separators=(",", ":"), allow_nan=False)
    b = line.encode("utf-8") + b"\n"
    if len(b) - 1 > MAX_LINE_BYTES:
        raise ReportError("report of %d bytes exceeds %d" %
                          (len(b) - 1, MAX_LINE_BYTES))
    return b


class Reporter:
    """Sends reports to one address, reconnecting as needed.

    clock is injectable for tests (time.monotonic by default).
    """

    def __init__(self, addr, ca_file=None, token=None, timeout=1.0,
                 max_backoff=5.0, clock=time.monotonic):
        self.host, self.port = envmod.split_host_port(addr,
                                                      envmod.REPORT_ADDR)
        self._ssl = None
        if ca_file:
            self._ssl = ssl.create_default_context(cafile=ca_file)
        self._token = token
        self._timeout = timeout
        self._max_backoff = max_backoff
        self._clock = clock
        self._sock = None
        self._next_try = 0.0
        self._backoff = 0.1
        self.sent = 0
        self.dropped = 0

    def send(self, report):
        """Sends one report (a dict of FIELDS, optionally "done").

        Returns True if it was written; never raises for a network error.
        """
        try:
            line = encode(report, self._token)
        except ReportError as e:
            LOG.error("pollux_worker: report not sent: %s", e)
            self.dropped += 1
            return False
        for attempt in range(2):
            if self._sock is None and not self._connect():
                self.dropped += 1
                return False
            try:
                self._sock.sendall(line)
                self.sent += 1
                return True
            except OSError as e:
                LOG.warning("pollux_worker: report connection broke: %s", e)
                self.close()
                # The peer may have closed an idle connection: one fresh
                # attempt at once, then wait for the back-off.
                self._next_try = 0.0
        self.dropped += 1
        return False

    def send_final(self, report, attempts=5):
        """Sends the last report of a worker (the done report), waiting
        out the reconnection back-off up to attempts times: the worker
        exits after it, so there is no later report to carry it."""
        for i in range(attempts):
            if self.send(report):
                return True
            if i + 1 < attempts:
                time.sleep(min(self._backoff, 1.0))
                self._next_try = 0.0
        return False

    def _connect(self):
        now = self._clock()
        if now < self._next_try:
            return False
        try:
            s = socket.create_connection((self.host, self.port),
                                         timeout=self._timeout)
            if self._ssl is not None:
                try:
                    s = self._ssl.wrap_socket(s, server_hostname=self.host)
                except BaseException:
                    s.close()
                    raise
            s.settimeout(self._timeout)
        except (OSError, ssl.SSLError) as e:
            LOG.warning("pollux_worker: cannot reach report address %s:%d"
                        " (retry in %.1fs): %s", self.host, self.port,
                        self._backoff, e)
            self._next_try = now + self._backoff
            self._backoff = min(self._backoff * 2, self._max_backoff)
            return False
        self._sock = s
        self._backoff = 0.1
        return True

    def close(self):
        """Closes the connection. Over TLS it first says close_notify and
        reads the listener's (and the session tickets it sent): closing a
        socket with unread data resets the connection, and a reset makes
        the peer's kernel discard reports it has not read yet."""
        s, self._sock = self._sock, None
        if s is None:
            return
        try:
            if isinstance(s, ssl.SSLSocket):
                s.settimeout(self._timeout)
                s = s.unwrap()
        except (OSError, ValueError):
            pass
        finally:
            try:
                s.close()
            except OSError:
                pass
