"""pollux_worker: the PyTorch side of docs/worker-protocol.md.

A training script calls init() to read its environment and join its job,
wraps its optimizer with job.optimizer() (which restores the checkpoint),
iterates job.loader() inside job.epochs(), and calls job.finish() when
training is done. The library runs the batch configuration Pollux chose,
measures step and synchronisation time and the gradient noise, scales the
learning rate by the AdaScale gain, checkpoints atomically (periodically,
at every epoch end and on SIGTERM) and reports to the node agent. See
docs/worker-library.md.
"""

from .checkpoint import CheckpointError
from .env import EnvError
from .job import Job, init
from .noise import NoiseEstimator

__all__ = ["init", "Job", "EnvError", "CheckpointError", "NoiseEstimator"]
