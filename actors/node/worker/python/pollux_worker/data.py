"""The elastic data loader: the batch configuration it is given, resumable
mid-epoch under any replica count.

Every epoch visits the dataset in one order, a permutation drawn from
(seed, epoch) alone, so every replica of every incarnation computes the
same one. The job's position is the number of samples of that order the
whole job has consumed in the epoch; it advances only at an optimizer step
(an iteration boundary), so a checkpoint always holds a position where
every replica stands. From a position p with K replicas, replica r takes
order[p:][r::K], cut to the length all replicas share, in micro-batches of
m samples; the last partial micro-batch of an epoch is dropped (fewer than
K * m samples). One iteration is s + 1 micro-batches (the epoch's last may
have fewer), after which p grows by K * m * (micro-batches run).
"""

import time

import torch
import torch.utils.data


def epoch_order(n, seed, epoch, shuffle=True):
    """The sample order of one epoch: a list of n indices."""
    if not shuffle:
        return list(range(n))
    g = torch.Generator()
    g.manual_seed((int(seed) * 1000003 + int(epoch)) % (2 ** 63))
    return torch.randperm(n, generator=g).tolist()


def local_indices(order, position, rank, replicas):
    """The indices replica rank takes from position on, all replicas
    taking the same number."""
    rest = order[position:]
    n = len(rest) // replicas
    return rest[rank::replicas][:n]


def iteration_plan(n_local, micro_bsz, accum_steps):
    """Micro-batch counts of the iterations left: a list of ints in
    [1, accum_steps + 1]."""
    micro = n_local // micro_bsz
    per = accum_steps + 1
    plan = [per] * (micro // per)
    if micro % per:
        plan.append(micro % per)
    return plan


class ElasticLoader:
    """Iterates over this replica's micro-batches of the current epoch,
    from the job's position. Each yielded batch must be followed by one
    call of the job's optimizer step()."""

    def __init__(self, job, dataset, shuffle=True, seed=0, collate_fn=None):
        if len(dataset) == 0:
            raise ValueError("pollux_worker: empty dataset")
        self._job = job
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.collate_fn = collate_fn or torch.utils.data.default_collate
        # A TensorDataset is indexed with one tensor of indices per batch.
        self._tensors = getattr(dataset, "tensors", None) \
            if isinstance(dataset, torch.utils.data.TensorDataset) else None

    def _local(self):
        j = self._job
        order = epoch_order(len(self.dataset), self.seed, j.epoch,
                            self.shuffle)
        return local_indices(order, j.position, j.env.rank,
                             j.env.world_size)

    def __len__(self):
        """Micro-batches left in the current epoch on this replica."""
        return len(self._local()) // self._job.env.atomic_bsz

    def _fetch(self, idx):
        if self._tensors is not None:
            t = torch.as_tensor(idx)
            return tuple(x[t] for x in self._tensors)
        return self.collate_fn([self.dataset[i] for i in idx])

    def __iter__(self):
        j = self._job
        if j.epoch_finished:
            return
        local = self._local()
        m, s = j.env.atomic_bsz, j.env.accum_steps
        plan = iteration_plan(len(local), m, s)
        k = 0
        for micro in plan:
            for i in range(micro):
                t0 = time.perf_counter()
                batch = self._fetch(local[k * m:(k + 1) * m])
                k += 1
                j._begin_micro(t0, sync=(i == micro - 1))
                yield batch
                if not j._micro_done:
                    raise RuntimeError(
                        "pollux_worker: optimizer.step() was not called "
                        "for a batch of the loader")
        j._finish_epoch_data()
