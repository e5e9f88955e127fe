"""pollux_worker: the PyTorch side of docs/worker-protocol.md.

A training script calls init() to read its environment and join its job,
wraps its model and optimizer with job.prepare() (which restores the
checkpoint and, with several replicas, wraps the model in
DistributedDataParallel), iterates job.loader() inside job.epochs(), and
calls job.finish() when training is done. The library runs the batch
configuration Pollux chose, measures step and synchronisation time and
the gradient noise, scales the learning rate by the job's rule (AdaScale
by default), runs mixed precision where the device has it, sums metrics
over replicas (job.accumulator()), checkpoints atomically (periodically,
at every epoch end and on SIGTERM) and reports to the node agent. See
docs/worker-library.md.
"""

from .accumulator import Accumulator
from .checkpoint import CheckpointError
from .env import EnvError
from .job import Job, init
from .noise import NoiseEstimator
from .scaling import AdaScale, LEGWScale, LinearScale, SqrtScale

__all__ = ["init", "Job", "EnvError", "CheckpointError", "NoiseEstimator",
           "Accumulator", "AdaScale", "LinearScale", "SqrtScale",
           "LEGWScale"]
