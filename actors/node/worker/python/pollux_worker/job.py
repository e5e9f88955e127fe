"""The job as one worker sees it: environment, process group, cores,
signals, the training state, checkpoints and reports."""

import datetime
import logging
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

from . import checkpoint as ckpt
from . import comm
from . import env as envmod
from . import malloc
from .data import ElasticLoader
from .accumulator import Accumulator
from .optim import SCALER_KEY, AdaptiveOptimizer, ParallelModel
from .report import Reporter

LOG = logging.getLogger("pollux_worker")

# Iterations after a (re)start whose times are not reported: the first
# ones pay for allocation and the first collective.
WARMUP_ITERATIONS = 2

# The most incarnations the checkpoint's run history keeps (the latest).
MAX_RUNS = 1000


def _setup_logging(e):
    if LOG.handlers:
        return
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter(
        "%(asctime)s %(levelname)s " +
        ("[%s inc=%d rank=%d] " % (e.job_id, e.incarnation, e.rank)
         if e else "") + "%(message)s"))
    LOG.addHandler(h)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False


def _run_entry(r):
    """One entry of a checkpoint's run history, checked."""
    ints = ("incarnation", "replicas", "nodes", "atomic_bsz", "accum_steps",
            "batch_size", "epoch")
    out = {k: int(r[k]) for k in ints}
    out["progress"] = float(r["progress"])
    if min(out[k] for k in ints) < 0 or not out["progress"] >= 0:
        raise ValueError("run history entry %r" % (r,))
    return out


def init(environ=None, checkpoint_interval=30.0, report_every=1.0,
         timeout=1800.0):
    """Starts this worker: reads the environment, pins the CPU slot's
    cores, installs the SIGTERM handler and joins the process group.

    A missing or malformed variable ends the process at once with status
    2 and a message naming it. checkpoint_interval (seconds) is how often
    rank 0 checkpoints besides every epoch end and SIGTERM; report_every
    (seconds) how often every rank reports; timeout bounds the
    rendezvous and each collective (torch's default: a replica may wait
    that long for another's evaluation; a replica that died closes its
    connections and fails the collective at once, and the node agent
    stops the survivors of a machine that vanished).
    """
    try:
        e = envmod.parse(environ)
    except envmod.EnvError as err:
        print("pollux_worker: bad environment: %s" % err, file=sys.stderr)
        sys.stderr.flush()
        raise SystemExit(2)
    _setup_logging(e)
    return Job(e, checkpoint_interval=checkpoint_interval,
               report_every=report_every, timeout=timeout)


class Job:
    """One worker of one job incarnation. Build it with init()."""

    def __init__(self, env, checkpoint_interval=30.0, report_every=1.0,
                 timeout=1800.0, clock=time.monotonic):
        self.env = env
        self.checkpoint_interval = checkpoint_interval
        self.report_every = report_every
        self._clock = clock
        self._stop_requested = False
        # Training state (checkpointed).
        self.epoch = 0
        self.position = 0
        self.epoch_finished = False
        self.progress = 0.0
        self.iterations = 0
        self.done = False
        self.metrics = {}
        # One entry per incarnation that restored (or started) training:
        # its batch configuration and where it started.
        self.runs = []
        self._last_times = None  # (step_time, sync_time) last reported
        # Per-run bookkeeping.
        self._opt = None
        self._extra = {}
        self._sync = False
        self._micro_done = True
        self._micro_t0 = 0.0
        self._since_start = 0
        self._win = [0.0, 0.0, 0]  # sums of step time, sync time; count
        self._last_report = clock()
        self._last_ckpt = clock()
        # The latest checkpoint this incarnation saved, as reported.
        self._saved = None

        signal.signal(signal.SIGTERM, self._on_sigterm)
        malloc.steady(os.environ)
        if env.cpus:
            try:
                os.sched_setaffinity(0, env.cpus)
            except OSError as err:
                self._fatal("%s %s: cannot pin to these cores: %s" %
                            (envmod.CPUS, ",".join(map(str, env.cpus)), err))
            torch.set_num_threads(len(env.cpus))
        self.device = torch.device("cpu")
        if env.gpus and torch.cuda.is_available():
            self.device = torch.device("cuda", 0)
            torch.cuda.set_device(self.device)
        self._cuda = self.device.type == "cuda"
        if env.world_size > 1:
            backend = "nccl" if self._cuda else "gloo"
            if backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ \
                    and env.master_addr in ("127.0.0.1", "localhost", "::1"):
                os.environ["GLOO_SOCKET_IFNAME"] = "lo"
            LOG.info("pollux_worker: joining %s process group at %s:%d "
                     "(%d replicas)", backend, env.master_addr,
                     env.master_port, env.world_size)
            dist.init_process_group(
                backend,
                init_method="tcp://%s:%d" % (
                    "[%s]" % env.master_addr if ":" in env.master_addr
                    else env.master_addr, env.master_port),
                world_size=env.world_size, rank=env.rank,
                timeout=datetime.timedelta(seconds=timeout))
        self.reporter = Reporter(env.report_addr, ca_file=env.report_ca,
                                 token=env.report_token)
        if self._stop_requested:
            self._exit_stopped(save=False)

    # -- public API --------------------------------------------------------

    @property
    def rank(self):
        return self.env.rank

    @property
    def world_size(self):
        return self.env.world_size

    def prepare(self, model, optimizer, lr_scaling="adascale",
                mixed_precision=False, bucket_cap_mb=None,
                max_bad_steps=20):
        """Wraps model and optimizer for this job and restores the
        checkpoint, if any, into them and the training state. Returns
        (model, optimizer) to train with: the model to call in training
        (DistributedDataParallel with more than one replica, model itself
        with one) and the AdaptiveOptimizer.

        model must already be on job.device. lr_scaling is a rule of
        scaling.py or its name ("adascale", "linear", "sqrt"; LEGW needs a
        scaling.LEGWScale). mixed_precision runs the optimizer with a
        GradScaler on a CUDA device (then compute the loss under
        job.autocast() and call optimizer.backward(loss)); elsewhere it
        logs that training stays in float32. bucket_cap_mb is DDP's
        bucket size (None: DDP's default).
        """
        if self._opt is not None:
            raise RuntimeError("pollux_worker: one model and optimizer per "
                               "job")
        self._opt = AdaptiveOptimizer(self, model, optimizer,
                                      lr_scaling=lr_scaling,
                                      mixed_precision=mixed_precision,
                                      max_bad_steps=max_bad_steps)
        self._restore()
        wrapped = model
        if self.env.world_size > 1:
            # DDP broadcasts rank 0's parameters and buffers.
            wrapped = ParallelModel(self, model, bucket_cap_mb=bucket_cap_mb)
            self._check_replicas_agree()
        LOG.info("pollux_worker: %d replica(s), m=%d, s=%d, learning rate "
                 "scaling %r%s", self.env.world_size, self.env.atomic_bsz,
                 self.env.accum_steps, self._opt.rule,
                 ", mixed precision" if self._opt.mixed_precision else "")
        return wrapped, self._opt

    def autocast(self):
        """The context to compute the loss in: torch.autocast on the job's
        device when the optimizer runs mixed precision, else nothing."""
        if self._opt is None:
            raise RuntimeError("pollux_worker: call job.prepare() first")
        return torch.autocast(self.device.type,
                              enabled=self._opt.mixed_precision)

    def accumulator(self):
        """A new Accumulator of metrics summed over this job's replicas
        (accumulator.py)."""
        return Accumulator(self.env.world_size, self.device)

    def loader(self, dataset, shuffle=True, seed=0, collate_fn=None):
        """The elastic loader of dataset for this job's batch
        configuration (see data.py)."""
        return ElasticLoader(self, dataset, shuffle=shuffle, seed=seed,
                             collate_fn=collate_fn)

    def track(self, name, obj):
        """Checkpoints obj (anything with state_dict / load_state_dict,
        e.g. a learning-rate scheduler) under name. Call before
        prepare()."""
        if self._opt is not None:
            raise RuntimeError("pollux_worker: track() after prepare()")
        self._extra[name] = obj

    def epochs(self, max_epochs):
        """Yields the epochs left until max_epochs, from the restored one.
        After each epoch's body (training and evaluation), the epoch is
        counted, rank 0 checkpoints and every rank reports."""
        if self._opt is None:
            raise RuntimeError("pollux_worker: call job.prepare() first")
        while not self.done and self.epoch < max_epochs:
            self._agree_stop()
            yield self.epoch
            self._end_epoch()
        self._agree_stop()

    def finish(self):
        """Training is complete: rank 0 saves the final checkpoint and
        sends the done report; every rank leaves the process group."""
        if self._opt is None:
            raise RuntimeError("pollux_worker: call job.prepare() first")
        if not self.done:
            if self.epoch_finished or self.position > 0:
                self._end_epoch(save=False)
            self.done = True
            if self.rank == 0:
                self._save()
        LOG.info("pollux_worker: training done at epoch %d, progress %.1f, "
                 "metrics %s", self.epoch, self.progress, self.metrics)
        if self.rank == 0:
            self._report(done=True)
        self._shutdown()

    # -- loader and optimizer hooks ----------------------------------------

    def _begin_micro(self, t0, sync):
        self._micro_t0 = t0
        self._sync = sync
        self._micro_done = False

    def _check_micro(self):
        if self._micro_done:
            raise RuntimeError("pollux_worker: step() without a batch of the"
                               " job's loader")

    def _sync_clock(self):
        if self._cuda:
            torch.cuda.synchronize()

    def _end_micro(self):
        self._micro_done = True

    def _end_iteration(self, micro, gain, sync_time, stop):
        self._micro_done = True
        self._sync_clock()
        step_time = time.perf_counter() - self._micro_t0
        self.position += self.env.world_size * self.env.atomic_bsz * micro
        self.progress += gain
        self.iterations += 1
        self._since_start += 1
        if self._since_start > WARMUP_ITERATIONS:
            self._win[0] += step_time
            self._win[1] += min(sync_time, step_time)
            self._win[2] += 1
        if stop:
            self._exit_stopped(save=True)
        now = self._clock()
        if self.rank == 0 and now - self._last_ckpt >= self.checkpoint_interval:
            self._save()
        if now - self._last_report >= self.report_every:
            self._report()

    def _finish_epoch_data(self):
        self.epoch_finished = True

    # -- epochs, stop, checkpoints, reports --------------------------------

    def _end_epoch(self, save=True):
        self.epoch += 1
        self.position = 0
        self.epoch_finished = False
        if save and self.rank == 0:
            self._save()
        self._report()

    def _on_sigterm(self, signum, frame):
        self._stop_requested = True

    def _agree_stop(self):
        """At an epoch boundary: stop if any replica was asked to."""
        stop = self._stop_requested
        if self.env.world_size > 1:
            t = torch.tensor([1.0 if stop else 0.0], device=self.device)
            comm.all_reduce(t)
            stop = float(t) > 0
        if stop:
            self._exit_stopped(save=True)

    def _exit_stopped(self, save):
        LOG.info("pollux_worker: stopping on SIGTERM at epoch %d, position "
                 "%d, progress %.1f", self.epoch, self.position,
                 self.progress)
        if save and self.rank == 0 and self._opt is not None:
            self._save()
        self._shutdown()
        raise SystemExit(0)

    def _shutdown(self):
        self.reporter.close()
        if dist.is_initialized():
            dist.destroy_process_group()

    def _fatal(self, msg):
        LOG.error("pollux_worker: %s", msg)
        try:
            self.reporter.close()
        except AttributeError:
            pass
        raise SystemExit(1)

    def _state_dict(self):
        return {"epoch": self.epoch, "position": self.position,
                "epoch_finished": self.epoch_finished,
                "progress": self.progress, "iterations": self.iterations,
                "done": self.done, "metrics": dict(self.metrics),
                "runs": [dict(r) for r in self.runs],
                "last_times": list(self._last_times or ())}

    def _save(self):
        payload = {
            "format": ckpt.FORMAT, "job": self.env.job_id,
            "model": self._opt.model.state_dict(),
            "optimizer": self._opt.optimizer.state_dict(),
            "state": self._state_dict(),
            "noise": self._opt.noise.state_dict(),
            "extra": {k: v.state_dict() for k, v in self._extra.items()},
        }
        if self._opt.scaler is not None:
            payload["extra"][SCALER_KEY] = self._opt.scaler.state_dict()
        summary = dict(self._state_dict(), job=self.env.job_id,
                       incarnation=self.env.incarnation,
                       grad_sqr=self._opt.noise.grad_sqr,
                       grad_var=self._opt.noise.grad_var,
                       saved_at=time.time())
        try:
            ckpt.save(self.env.checkpoint_dir, payload, summary)
        except ckpt.CheckpointError as e:
            # The previous checkpoint is intact; training goes on.
            LOG.error("pollux_worker: %s", e)
            return
        self._last_ckpt = self._clock()
        self._saved = {"epoch": self.epoch, "progress": self.progress,
                       "saved_at": summary["saved_at"]}

    def _restore(self):
        path = os.path.join(self.env.checkpoint_dir, ckpt.CHECKPOINT)
        try:
            payload = ckpt.load(self.env.checkpoint_dir, self.env.job_id)
        except ckpt.CheckpointError as e:
            self._fatal(str(e))
        if payload is not None:
            try:
                self._opt.model.load_state_dict(payload["model"])
                self._opt.optimizer.load_state_dict(payload["optimizer"])
                self._opt.noise.load_state_dict(payload["noise"])
                for name, obj in self._extra.items():
                    obj.load_state_dict(payload["extra"][name])
                # A checkpoint written without mixed precision has none.
                scaler = payload["extra"].get(SCALER_KEY)
                if self._opt.scaler is not None and scaler is not None:
                    self._opt.scaler.load_state_dict(scaler)
                st = payload["state"]
                epoch, position = int(st["epoch"]), int(st["position"])
                progress = float(st["progress"])
                if epoch < 0 or position < 0 or not progress >= 0:
                    raise ValueError("epoch %d, position %d, progress %r" %
                                     (epoch, position, progress))
                self.epoch, self.position, self.progress = \
                    epoch, position, progress
                self.epoch_finished = bool(st["epoch_finished"])
                self.iterations = int(st["iterations"])
                self.done = bool(st["done"])
                self.metrics = dict(st["metrics"])
                # Checkpoints written before the run history have none.
                self.runs = [_run_entry(r) for r in st.get("runs", [])]
                lt = st["last_times"]
                self._last_times = (float(lt[0]), float(lt[1])) \
                    if lt else None
            except (RuntimeError, ValueError, KeyError, TypeError,
                    IndexError) as e:
                msg = " ".join(str(e).split())
                self._fatal("checkpoint %s does not fit this job: %s: %s" %
                            (path, type(e).__name__, msg[:400]))
            LOG.info("pollux_worker: restored %s: epoch %d, position %d, "
                     "progress %.1f%s", path, self.epoch, self.position,
                     self.progress, " (done)" if self.done else "")
        e = self.env
        self.runs = (self.runs + [{
            "incarnation": e.incarnation, "replicas": e.world_size,
            "nodes": e.num_nodes, "atomic_bsz": e.atomic_bsz,
            "accum_steps": e.accum_steps, "batch_size": e.total_bsz,
            "epoch": self.epoch, "progress": self.progress}])[-MAX_RUNS:]
        self._last_ckpt = self._clock()

    def _check_replicas_agree(self):
        """All replicas must have read the same training state."""
        path = os.path.join(self.env.checkpoint_dir, ckpt.CHECKPOINT)
        mine = torch.tensor([float(self.epoch), float(self.position),
                             self.progress], dtype=torch.float64,
                            device=self.device)
        lead = mine.clone()
        comm.broadcast(lead, 0)
        if not torch.equal(mine, lead):
            self._fatal("checkpoint %s: rank %d read epoch %d position %d "
                        "progress %.3f, rank 0 epoch %d position %d progress"
                        " %.3f (is %s shared storage?)" % (
                            path, self.rank, mine[0], mine[1], mine[2],
                            lead[0], lead[1], lead[2],
                            envmod.CHECKPOINT_DIR))

    def _report(self, done=False):
        if self._win[2] > 0:
            self._last_times = (self._win[0] / self._win[2],
                                self._win[1] / self._win[2])
            self._win = [0.0, 0.0, 0]
        self._last_report = self._clock()
        if self._last_times is None:
            return  # nothing measured yet: step_time must be > 0
        step, sync = self._last_times
        r = {"job": self.env.job_id, "incarnation": self.env.incarnation,
             "rank": self.env.rank, "step_time": step, "sync_time": sync,
             "grad_sqr": self._opt.noise.grad_sqr,
             "grad_var": self._opt.noise.grad_var, "epoch": self.epoch,
             "progress": self.progress, "local_bsz": self.env.atomic_bsz,
             "accum_steps": self.env.accum_steps}
        if self._saved is not None:
            r["checkpoint"] = dict(self._saved)
        if done:
            r["done"] = True
            if not self.reporter.send_final(r):
                LOG.error("pollux_worker: the done report could not be sent "
                          "to %s", self.env.report_addr)
            return
        self.reporter.send(r)
