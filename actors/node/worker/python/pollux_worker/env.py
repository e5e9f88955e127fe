"""The worker's environment, as docs/worker-protocol.md defines it.

Parsing mirrors actors/node/workerproto (ParseEnv, Env.Validate): every
variable is checked once at start, and the first missing or malformed one
is an EnvError naming it, so a worker started wrongly exits at once with a
message an operator can act on.
"""

import math
import os
import re

# Names of the protocol's variables (actors/node/workerproto/env.go).
JOB_ID = "POLLUX_JOB_ID"
INCARNATION = "POLLUX_INCARNATION"
RANK = "POLLUX_RANK"
LOCAL_RANK = "POLLUX_LOCAL_RANK"
WORLD_SIZE = "POLLUX_WORLD_SIZE"
NUM_NODES = "POLLUX_NUM_NODES"
MASTER_ADDR = "POLLUX_MASTER_ADDR"
MASTER_PORT = "POLLUX_MASTER_PORT"
INIT_BSZ = "POLLUX_INIT_BSZ"
ATOMIC_BSZ = "POLLUX_ATOMIC_BSZ"
ACCUM_STEPS = "POLLUX_ACCUM_STEPS"
GAIN = "POLLUX_GAIN"
CHECKPOINT_DIR = "POLLUX_CHECKPOINT_DIR"
REPORT_ADDR = "POLLUX_REPORT_ADDR"
CUDA_DEVICES = "CUDA_VISIBLE_DEVICES"
# Optional: the cores of a CPU slot (`pollux agent --cpu-slots N`), a
# comma-separated list of CPU ids; the library pins itself to them.
CPUS = "POLLUX_CPUS"
# Optional: a PEM file of the CA that signs the report listener's
# certificate; when set, reports go over TLS.
REPORT_CA = "POLLUX_REPORT_CA"
# Optional: the per-incarnation secret every report carries.
REPORT_TOKEN = "POLLUX_REPORT_TOKEN"
# A file holding the report token, readable by the worker's user only
# (the agent's way: the token is then in no environment).
REPORT_TOKEN_FILE = "POLLUX_REPORT_TOKEN_FILE"
# Longest report token read (workerproto.MaxTokenBytes).
MAX_TOKEN_BYTES = 128

_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")


class EnvError(Exception):
    """A missing or malformed variable of the worker's environment."""


class Env:
    """What one worker is told at start (workerproto.Env)."""

    __slots__ = ("job_id", "incarnation", "rank", "local_rank", "world_size",
                 "num_nodes", "master_addr", "master_port", "gpus", "cpus",
                 "init_bsz", "atomic_bsz", "accum_steps", "gain",
                 "checkpoint_dir", "report_addr", "report_ca", "report_token")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw.get(k))

    @property
    def total_bsz(self):
        """M = K * m * (s + 1), the batch of one optimizer step."""
        return self.world_size * self.atomic_bsz * (self.accum_steps + 1)

    def __repr__(self):
        fields = ", ".join("%s=%r" % (k, getattr(self, k))
                           for k in self.__slots__ if k != "report_token")
        return "Env(%s)" % fields


def split_host_port(addr, name):
    """Splits host:port (IPv6 hosts in brackets) or raises EnvError."""
    m = re.match(r"^\[([^\]]+)\]:(\d+)$", addr) or \
        re.match(r"^([^:\[\]]*):(\d+)$", addr)
    if not m or not m.group(1):
        raise EnvError("%s %r: want host:port" % (name, addr))
    port = int(m.group(2))
    if not 1 <= port <= 65535:
        raise EnvError("%s %r: port outside [1, 65535]" % (name, addr))
    return m.group(1), port


def _int_list(name, value):
    out = []
    for f in value.split(","):
        f = f.strip()
        if not f.isdigit():
            raise EnvError("%s %r: want comma-separated device numbers" %
                           (name, value))
        out.append(int(f))
    return out


def parse(environ=None):
    """Reads and validates the environment (os.environ by default).

    Raises EnvError naming the first variable that is missing, malformed or
    out of range.
    """
    environ = os.environ if environ is None else environ

    def get(name):
        v = environ.get(name)
        if v is None:
            raise EnvError("%s is not set" % name)
        return v

    def integer(name, lo=None, hi=None):
        s = get(name)
        try:
            v = int(s, 10)
        except ValueError:
            raise EnvError("%s %r: want an integer" % (name, s)) from None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise EnvError("%s %d outside [%s, %s]" % (
                name, v, "-inf" if lo is None else lo,
                "inf" if hi is None else hi))
        return v

    job = get(JOB_ID)
    if not _NAME_RE.match(job):
        raise EnvError("%s %r: want 1-63 characters of [a-z0-9._-], starting"
                       " and ending with a letter or digit" % (JOB_ID, job))
    e = Env(job_id=job)
    e.incarnation = integer(INCARNATION, lo=0)
    e.world_size = integer(WORLD_SIZE, lo=1)
    e.rank = integer(RANK, lo=0, hi=e.world_size - 1)
    e.local_rank = integer(LOCAL_RANK, lo=0, hi=e.rank)
    e.num_nodes = integer(NUM_NODES, lo=1, hi=e.world_size)
    e.master_addr = get(MASTER_ADDR)
    if not e.master_addr:
        raise EnvError("%s is empty" % MASTER_ADDR)
    e.master_port = integer(MASTER_PORT, lo=1, hi=65535)
    e.init_bsz = integer(INIT_BSZ, lo=1)
    e.atomic_bsz = integer(ATOMIC_BSZ, lo=1)
    e.accum_steps = integer(ACCUM_STEPS, lo=0)
    g = get(GAIN)
    try:
        e.gain = float(g)
    except ValueError:
        raise EnvError("%s %r: want a number" % (GAIN, g)) from None
    if not (e.gain > 0) or math.isinf(e.gain):
        raise EnvError("%s %r: want a finite number > 0" % (GAIN, g))
    e.checkpoint_dir = get(CHECKPOINT_DIR)
    if not os.path.isabs(e.checkpoint_dir):
        raise EnvError("%s %r: want an absolute path" %
                       (CHECKPOINT_DIR, e.checkpoint_dir))
    e.report_addr = get(REPORT_ADDR)
    split_host_port(e.report_addr, REPORT_ADDR)
    devs = environ.get(CUDA_DEVICES, "")
    e.gpus = _int_list(CUDA_DEVICES, devs) if devs.strip() else []
    cpus = environ.get(CPUS, "")
    e.cpus = _int_list(CPUS, cpus) if cpus.strip() else []
    e.report_ca = environ.get(REPORT_CA) or None
    if e.report_ca is not None and not os.path.isfile(e.report_ca):
        raise EnvError("%s %r: no such file" % (REPORT_CA, e.report_ca))
    e.report_token = environ.get(REPORT_TOKEN) or None
    token_file = environ.get(REPORT_TOKEN_FILE)
    if token_file:
        if not os.path.isabs(token_file):
            raise EnvError("%s %r: not an absolute path" %
                           (REPORT_TOKEN_FILE, token_file))
        try:
            with open(token_file, "rb") as f:
                raw = f.read(MAX_TOKEN_BYTES + 2)
        except OSError as err:
            raise EnvError("%s: %s" % (REPORT_TOKEN_FILE, err)) from err
        e.report_token = raw.decode("ascii", "replace").rstrip() or None
    return e
