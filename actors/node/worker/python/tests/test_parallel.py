"""The data-parallel path: DistributedDataParallel with accumulation, the
gradient statistics it takes, mixed precision and the Accumulator across
replicas, each against the micro-batch gradients taken one by one."""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ddp_worker  # noqa: E402
import replicas  # noqa: E402
from pollux_worker import scaling  # noqa: E402
from pollux_worker.noise import NoiseEstimator  # noqa: E402


class ParallelTest(unittest.TestCase):
    def check_against_reference(self, k, m, s, m0, iterations, args=(),
                                rule="linear"):
        codes, outs, errs = replicas.run(k, m, s, m0, [
            "--iterations", str(iterations), "--lr-scaling", rule] +
            list(args))
        for rank, code in enumerate(codes):
            self.assertEqual(code, 0, "rank %d:\n%s" % (rank, errs[rank]))
        steps, params = replicas.reference(
            k, m, s, m0, iterations,
            scaling.rule(rule, warmup_epochs=ddp_worker.WARMUP_EPOCHS,
                         data_size=ddp_worker.SAMPLES, init_bsz=m0),
            NoiseEstimator())
        for out in outs:
            self.assertEqual(len(out["observed"]), iterations)
            for got, want in zip(out["observed"], steps):
                local, total, count, gm, gm0 = got
                self.assertEqual((count, gm, gm0), (want["count"], m, m0))
                if local is not None:
                    self.assertAlmostEqual(local / want["local"], 1,
                                           delta=1e-5)
                self.assertAlmostEqual(total / want["total"], 1, delta=1e-5)
            for got, want in zip(out["lrs"], steps):
                self.assertAlmostEqual(got, want["lr"], delta=1e-9)
            got = torch.tensor(out["params"], dtype=torch.float64)
            self.assertLess(float((got - params).abs().max()), 1e-5)
        # Every replica holds the same parameters, bit for bit.
        for out in outs[1:]:
            self.assertEqual(out["params"], outs[0]["params"])
        return outs, errs

    def test_ddp_with_accumulation_matches_the_micro_batches(self):
        # K=2, m=4, s=1: 4 micro-batch gradients per step, zero_grad()
        # called before every micro-batch (a no-op while accumulating).
        outs, _ = self.check_against_reference(2, 4, 1, 8, 3)
        for out in outs:
            self.assertTrue(all(t > 0 for t in out["sync_times"]),
                            out["sync_times"])
            # 3 iterations of 2 micro-batches of 4 on each of 2 replicas.
            self.assertEqual(out["accumulated"],
                             {"samples": 48.0, "rank0": 6.0, "rank1": 6.0})

    def test_ddp_without_accumulation(self):
        self.check_against_reference(2, 8, 0, 8, 3)

    def test_one_replica_accumulates_without_ddp(self):
        outs, _ = self.check_against_reference(1, 4, 2, 4, 2)
        self.assertEqual(outs[0]["sync_times"], [0.0, 0.0])

    def test_one_micro_batch_per_step(self):
        self.check_against_reference(1, 8, 0, 8, 3)

    def test_each_learning_rate_rule(self):
        # S = 2: linear doubles the learning rate, sqrt multiplies it by
        # 1.41, adascale by the gain in [1, 2], legw ramps sqrt up over
        # its warmup (2 epochs of 64 at M0 = 4, stretched by S: 64 steps).
        for rule in sorted(scaling.RULES):
            with self.subTest(rule=rule):
                outs, _ = self.check_against_reference(1, 4, 1, 4, 3,
                                                       rule=rule)
                lrs = outs[0]["lrs"]
                if rule == "linear":
                    self.assertEqual(lrs, [0.2] * 3)
                if rule == "sqrt":
                    for lr in lrs:
                        self.assertAlmostEqual(lr, 0.1 * 2 ** 0.5)
                if rule == "adascale":
                    self.assertTrue(all(0.1 <= lr <= 0.2 for lr in lrs))
                if rule == "legw":
                    self.assertTrue(lrs[0] < lrs[1] < lrs[2] < 0.02, lrs)

    def test_statistics_are_taken_unscaled(self):
        # A loss scale of 2^10 (as a GradScaler's): the same statistics
        # and parameters as without it.
        self.check_against_reference(2, 4, 1, 8, 2,
                                     args=["--fake-scaler", "1024"])

    def test_a_cpu_slot_pins_the_worker_and_sizes_its_threads(self):
        # One core, then all: POLLUX_CPUS sets the affinity and torch's
        # threads (replicas.run sets OMP_NUM_THREADS=1 besides).
        cores = sorted(os.sched_getaffinity(0))
        for slot in ([cores[-1]], cores):
            codes, outs, errs = replicas.run(
                1, 4, 0, 4, ["--iterations", "1"],
                env={"POLLUX_CPUS": ",".join(map(str, slot))})
            self.assertEqual(codes, [0], errs)
            self.assertEqual(outs[0]["affinity"], slot)
            self.assertEqual(outs[0]["threads"], len(slot))

    def test_a_batch_around_the_ddp_model_is_refused(self):
        codes, outs, errs = replicas.run(2, 4, 1, 8, ["--unwrapped"])
        self.assertEqual(codes, [1, 1], errs)
        for err in errs:
            self.assertIn("did not go through the model that job.prepare() "
                          "returned", err)

    def test_mixed_precision_without_cuda_trains_in_float32(self):
        if torch.cuda.is_available():
            self.skipTest("this machine has CUDA: see "
                          "test_mixed_precision_on_cuda")
        _, errs = self.check_against_reference(
            1, 4, 1, 8, 2, args=["--mixed-precision"])
        self.assertIn("mixed precision needs a CUDA device; training on cpu "
                      "in float32", errs[0])

    @unittest.skipUnless(torch.cuda.is_available(),
                         "mixed precision (torch.autocast with a GradScaler) "
                         "needs a CUDA device: none here")
    def test_mixed_precision_on_cuda(self):
        codes, outs, errs = replicas.run(
            1, 4, 1, 8, ["--iterations", "3", "--lr-scaling", "linear",
                         "--mixed-precision"],
            env={"CUDA_VISIBLE_DEVICES": "0"})
        self.assertEqual(codes, [0], errs)
        steps, _ = replicas.reference(1, 4, 1, 8, 3, scaling.LinearScale(),
                                      NoiseEstimator())
        # float16 autocast: the statistics agree to its precision.
        for got, want in zip(outs[0]["observed"], steps):
            self.assertAlmostEqual(got[0] / want["local"], 1, delta=2e-2)
            self.assertAlmostEqual(got[1] / want["total"], 1, delta=2e-2)


if __name__ == "__main__":
    unittest.main()
