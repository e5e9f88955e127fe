import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker import data  # noqa: E402


class DataTest(unittest.TestCase):
    def test_order_is_a_permutation_per_epoch(self):
        a = data.epoch_order(100, seed=3, epoch=0)
        self.assertEqual(sorted(a), list(range(100)))
        self.assertEqual(a, data.epoch_order(100, seed=3, epoch=0))
        self.assertNotEqual(a, data.epoch_order(100, seed=3, epoch=1))
        self.assertEqual(data.epoch_order(5, 0, 0, shuffle=False),
                         [0, 1, 2, 3, 4])

    def test_replicas_partition_the_rest(self):
        order = data.epoch_order(103, seed=1, epoch=2)
        for k in (1, 2, 3, 4):
            for pos in (0, 10, 50):
                parts = [data.local_indices(order, pos, r, k)
                         for r in range(k)]
                self.assertEqual(len({len(p) for p in parts}), 1)
                seen = [i for p in parts for i in p]
                self.assertEqual(len(seen), len(set(seen)))
                self.assertTrue(set(seen) <= set(order[pos:]))
                self.assertLess(len(order) - pos - len(seen), k)

    def test_resume_under_another_replica_count(self):
        # Run 3 iterations of K=2, m=4, s=1 from position 0, then resume
        # with K=3: the samples seen before and after never overlap and
        # together cover the epoch but for less than one micro-batch per
        # replica.
        n, order = 97, data.epoch_order(97, seed=0, epoch=0)
        seen, pos = [], 0
        k, m, s = 2, 4, 1
        local = [data.local_indices(order, pos, r, k) for r in range(k)]
        for it in range(3):
            for r in range(k):
                seen += local[r][it * m * (s + 1):(it + 1) * m * (s + 1)]
            pos += k * m * (s + 1)
        k, m, s = 3, 5, 0
        local = [data.local_indices(order, pos, r, k) for r in range(k)]
        plan = data.iteration_plan(len(local[0]), m, s)
        for it in range(len(plan)):
            for r in range(k):
                seen += local[r][it * m:(it + 1) * m]
        self.assertEqual(len(seen), len(set(seen)))
        self.assertLess(n - len(seen), k * m)

    def test_iteration_plan(self):
        self.assertEqual(data.iteration_plan(100, 10, 2), [3, 3, 3, 1])
        self.assertEqual(data.iteration_plan(99, 10, 0), [1] * 9)
        self.assertEqual(data.iteration_plan(9, 10, 0), [])


if __name__ == "__main__":
    unittest.main()
