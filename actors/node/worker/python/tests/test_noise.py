import math
import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker.noise import NoiseEstimator  # noqa: E402


def population(n=2000, d=50, seed=0):
    """Per-sample gradients with a known mean and covariance trace."""
    g = torch.Generator()
    g.manual_seed(seed)
    mean = torch.randn(d, generator=g, dtype=torch.float64) * 0.3
    noise = torch.randn(n, d, generator=g, dtype=torch.float64) * \
        torch.linspace(0.2, 2.0, d, dtype=torch.float64)
    samples = mean + noise - noise.mean(0)
    G = samples.mean(0)
    trace = float(((samples - G) ** 2).sum(1).mean())
    return samples, float(G.dot(G)), trace


class NoiseTest(unittest.TestCase):
    def test_unbiased_estimate_converges(self):
        samples, sqr, trace = population()
        n = len(samples)
        b, count, m0 = 8, 4, 16
        est = NoiseEstimator(smoothing=0.99)
        g = torch.Generator()
        g.manual_seed(1)
        for step in range(3000):
            idx = torch.randperm(n, generator=g)[:b * count].view(count, b)
            grads = samples[idx].mean(1)  # count micro-batch gradients
            local = float((grads ** 2).sum(1).mean())
            mean = grads.mean(0)
            self.assertTrue(est.observe(local, float(mean.dot(mean)), count,
                                        b, m0))
        # Sampling without replacement from n: the variance estimate
        # carries n/(n-1), the norm -trace/(n-1); both tiny here.
        self.assertAlmostEqual(est.grad_sqr / sqr, 1, delta=0.10)
        self.assertAlmostEqual(est.grad_var / (trace / m0), 1, delta=0.10)
        self.assertFalse(est.biased)

    def test_differenced_estimate_on_one_replica(self):
        samples, sqr, trace = population(seed=2)
        n, b, m0 = len(samples), 16, 16
        est = NoiseEstimator(smoothing=0.99)
        g = torch.Generator()
        g.manual_seed(3)
        self.assertIsNone(est.gain(2.0))
        for step in range(4000):
            idx = torch.randperm(n, generator=g)[:b]
            self.assertTrue(est.observe_single(samples[idx].mean(0), b, m0))
        self.assertTrue(est.biased)
        self.assertAlmostEqual(est.grad_sqr / sqr, 1, delta=0.10)
        self.assertAlmostEqual(est.grad_var / (trace / m0), 1, delta=0.10)

    def test_gain_is_adascale(self):
        est = NoiseEstimator()
        est.load_state_dict({"avg": {"sqr": [1.0, 1.0], "var": [3.0, 1.0]},
                             "biased": False, "samples": 1})
        # (var + sqr) / (var / scale + sqr) = 4 / (1.5 + 1) at scale 2.
        self.assertAlmostEqual(est.gain(2.0), 4 / 2.5)
        self.assertAlmostEqual(est.gain(1.0), 1.0)
        est.load_state_dict({"avg": {"sqr": [-1.0, 1.0], "var": [3.0, 1.0]},
                             "biased": False, "samples": 1})
        self.assertEqual(est.grad_sqr, 0.0)  # clamped: all noise
        self.assertAlmostEqual(est.gain(4.0), 4.0)

    def test_non_finite_samples_change_nothing(self):
        est = NoiseEstimator()
        self.assertTrue(est.observe(2.0, 1.0, 4, 8, 8))
        before = est.state_dict()
        self.assertFalse(est.observe(float("nan"), 1.0, 4, 8, 8))
        self.assertFalse(est.observe(2.0, float("inf"), 4, 8, 8))
        self.assertFalse(est.observe(1e308, -1e308, 4, 8, 8))  # overflows
        self.assertFalse(est.observe_single(
            torch.tensor([1.0, float("nan")]), 8, 8))
        self.assertEqual(est.state_dict(), before)
        self.assertTrue(math.isfinite(est.grad_sqr))

    def test_first_sample_is_not_shrunk(self):
        # Bias correction: one sample is its own average.
        est = NoiseEstimator(smoothing=0.999)
        est.observe(3.0, 2.0, 2, 10, 10)
        self.assertAlmostEqual(est.grad_sqr, (2 * 2.0 - 3.0) / 1)
        self.assertAlmostEqual(est.grad_var, (3.0 - 2.0) * 2)

    def test_state_round_trip_and_refusal(self):
        est = NoiseEstimator()
        est.observe(3.0, 2.0, 2, 10, 10)
        again = NoiseEstimator()
        again.load_state_dict(est.state_dict())
        self.assertEqual(again.grad_sqr, est.grad_sqr)
        with self.assertRaises(ValueError):
            again.load_state_dict({"avg": {"sqr": [float("nan"), 1.0]},
                                   "biased": False, "samples": 1})


if __name__ == "__main__":
    unittest.main()
