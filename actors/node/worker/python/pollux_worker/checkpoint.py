"""Atomic checkpoints in POLLUX_CHECKPOINT_DIR.

Rank 0 writes CHECKPOINT through a temporary file in the same directory
(flushed and fsync'ed), keeps the checkpoint it replaces as PREVIOUS (a
hard link, or a copy where links are not supported), renames the new file
into place and fsyncs the directory: a worker killed at any moment leaves
a complete checkpoint, never a half-written one. SUMMARY, a small JSON
file written the same way after each checkpoint, states the saved epoch,
progress, metrics and whether training is done, for tools without torch.

On disk a checkpoint is torch.save of {"format", "meta", "tensors"}: every
tensor of the payload goes into the list "tensors" and everything else
(numbers, strings, the nesting) into "meta", a JSON string. It is read with
torch.load(weights_only=True), which refuses any pickled code, so reading
a checkpoint can never run code (torch 1.13's restricted unpickler cannot
even read a Python float: hence the JSON).

Loading is strict: a file that does not unpickle (truncated, corrupt),
holds something other than this library's checkpoint, belongs to another
job, or (checked by the caller) does not fit the model is a
CheckpointError naming the file. Nothing falls back to a fresh start, and
nothing is deleted or rewritten: the bad file and PREVIOUS stay for the
operator.
"""

import io
import json
import math
import os
import shutil
import tempfile

import torch

CHECKPOINT = "pollux-checkpoint.pt"
PREVIOUS = "pollux-checkpoint.prev.pt"
SUMMARY = "pollux-progress.json"
FORMAT = "pollux-worker/1"

# Keys every checkpoint holds.
KEYS = ("format", "job", "model", "optimizer", "state", "noise", "extra")


class CheckpointError(Exception):
    """A checkpoint that cannot be written, read or applied."""


def _fsync_dir(d):
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomic(directory, name, data):
    fd, tmp = tempfile.mkstemp(prefix=name + ".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _flatten(obj, tensors):
    """obj as JSON-able nodes, its tensors appended to tensors."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj.detach().cpu())
        return {"t": len(tensors) - 1}
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return {"v": obj}
    if isinstance(obj, int):
        return {"v": obj}
    if isinstance(obj, float):
        return {"f": repr(obj)} if not math.isfinite(obj) else {"v": obj}
    if isinstance(obj, dict):
        return {"d": [[_flatten(k, tensors), _flatten(v, tensors)]
                      for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"u": [_flatten(v, tensors) for v in obj]}
    if isinstance(obj, list):
        return {"l": [_flatten(v, tensors) for v in obj]}
    raise TypeError("cannot checkpoint a %s" % type(obj).__name__)


def _unflatten(node, tensors):
    if not isinstance(node, dict) or len(node) != 1:
        raise ValueError("malformed node %r" % (node,))
    (kind, v), = node.items()
    if kind == "t":
        return tensors[v]
    if kind == "v":
        return v
    if kind == "f":
        return float(v)
    if kind == "d":
        return {_unflatten(k, tensors): _unflatten(x, tensors) for k, x in v}
    if kind == "u":
        return tuple(_unflatten(x, tensors) for x in v)
    if kind == "l":
        return [_unflatten(x, tensors) for x in v]
    raise ValueError("malformed node kind %r" % kind)


def save(directory, payload, summary):
    """Writes payload (a dict of KEYS) and summary (JSON-able) atomically.

    Raises CheckpointError; the previous checkpoint is then untouched.
    """
    path = os.path.join(directory, CHECKPOINT)
    try:
        os.makedirs(directory, exist_ok=True)
        tensors = []
        meta = json.dumps(_flatten(payload, tensors))
        buf = io.BytesIO()
        torch.save({"format": FORMAT, "meta": meta, "tensors": tensors}, buf)
        data = buf.getvalue()
        if os.path.exists(path):
            prev_tmp = os.path.join(directory, PREVIOUS + ".tmp")
            try:
                os.unlink(prev_tmp)
            except FileNotFoundError:
                pass
            try:
                os.link(path, prev_tmp)
            except OSError:
                shutil.copy2(path, prev_tmp)
            os.replace(prev_tmp, os.path.join(directory, PREVIOUS))
        _write_atomic(directory, CHECKPOINT, data)
        _write_atomic(directory, SUMMARY,
                      (json.dumps(summary, sort_keys=True, allow_nan=False)
                       + "\n").encode())
        _fsync_dir(directory)
    except Exception as e:  # pickling and I/O fail in many ways
        raise CheckpointError("checkpoint %s: cannot write: %s" %
                              (path, e)) from e
    return path


def load(directory, job_id):
    """Reads the checkpoint of job_id in directory.

    Returns None if there is none (a fresh start) or the payload dict.
    Raises CheckpointError naming the file for anything else.
    """
    path = os.path.join(directory, CHECKPOINT)
    if not os.path.exists(path):
        return None
    hint = ""
    if os.path.exists(os.path.join(directory, PREVIOUS)):
        hint = " (the previous checkpoint %s is kept)" % os.path.join(
            directory, PREVIOUS)
    try:
        with open(path, "rb") as f:
            raw = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types for a bad file
        raise CheckpointError("checkpoint %s does not load: %s%s" %
                              (path, _one_line(e), hint)) from e
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise CheckpointError("checkpoint %s is not a %s checkpoint%s" %
                              (path, FORMAT, hint))
    try:
        payload = _unflatten(json.loads(raw["meta"]), raw["tensors"])
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise CheckpointError("checkpoint %s is malformed: %s%s" %
                              (path, _one_line(e), hint)) from e
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError("checkpoint %s is not a %s checkpoint%s" %
                              (path, FORMAT, hint))
    missing = [k for k in KEYS if k not in payload]
    if missing:
        raise CheckpointError("checkpoint %s lacks %s%s" %
                              (path, ", ".join(missing), hint))
    if payload["job"] != job_id:
        raise CheckpointError("checkpoint %s belongs to job %r, not %r%s" %
                              (path, payload["job"], job_id, hint))
    return payload


def _one_line(e):
    s = "%s: %s" % (type(e).__name__, e)
    s = " ".join(s.split())
    return s if len(s) <= 300 else s[:297] + "..."


def read_summary(directory):
    """The SUMMARY of directory as a dict, or None if there is none."""
    try:
        with open(os.path.join(directory, SUMMARY)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None
