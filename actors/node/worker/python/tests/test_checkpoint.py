import collections
import os
import shutil
import sys
import tempfile
import unittest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker import checkpoint as ckpt  # noqa: E402


def read(path):
    with open(path, "rb") as f:
        return f.read()


def payload(job="j", value=1.0):
    return {"format": ckpt.FORMAT, "job": job,
            "model": {"w": torch.full((3,), value)}, "optimizer": {},
            "state": {"epoch": 1, "progress": 2.5}, "noise": {}, "extra": {}}


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, ckpt.CHECKPOINT)
        self.prev = os.path.join(self.dir, ckpt.PREVIOUS)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_fresh_start(self):
        self.assertIsNone(ckpt.load(self.dir, "j"))

    def test_round_trip_keeps_the_previous(self):
        ckpt.save(self.dir, payload(value=1.0), {"epoch": 1})
        ckpt.save(self.dir, payload(value=2.0), {"epoch": 2})
        got = ckpt.load(self.dir, "j")
        self.assertEqual(float(got["model"]["w"][0]), 2.0)
        os.replace(self.prev, self.path)
        prev = ckpt.load(self.dir, "j")
        self.assertEqual(float(prev["model"]["w"][0]), 1.0)
        self.assertEqual(ckpt.read_summary(self.dir)["epoch"], 2)
        leftovers = [f for f in os.listdir(self.dir) if ".tmp" in f]
        self.assertEqual(leftovers, [])

    def assertRefused(self, mention):
        before = read(self.path)
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.load(self.dir, "j")
        self.assertIn(self.path, str(cm.exception))
        self.assertIn(mention, str(cm.exception))
        self.assertEqual(read(self.path), before)
        return str(cm.exception)

    def test_truncated(self):
        ckpt.save(self.dir, payload(), {})
        ckpt.save(self.dir, payload(), {})
        with open(self.path, "r+b") as f:
            f.truncate(os.path.getsize(self.path) // 2)
        msg = self.assertRefused("does not load")
        self.assertIn(self.prev, msg)
        os.replace(self.prev, self.path)
        self.assertIsNotNone(ckpt.load(self.dir, "j"))

    def test_other_job(self):
        ckpt.save(self.dir, payload(job="other"), {})
        self.assertRefused("belongs to job 'other'")

    def test_not_ours(self):
        torch.save({"model": {}}, self.path)
        self.assertRefused("is not a")

    def test_malformed(self):
        torch.save({"format": ckpt.FORMAT, "meta": "{", "tensors": []},
                   self.path)
        self.assertRefused("malformed")

    def test_code_is_not_run(self):
        marker = os.path.join(self.dir, "ran")

        class Evil:
            def __reduce__(self):
                return (os.makedirs, (marker,))
        torch.save({"format": ckpt.FORMAT, "x": Evil()}, self.path)
        self.assertRefused("does not load")
        self.assertFalse(os.path.exists(marker))

    def test_values_survive(self):
        p = payload()
        p["optimizer"] = {"state": {0: {"momentum_buffer": torch.ones(2)}},
                          "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99),
                                            "params": [0], "x": None,
                                            "inf": float("inf")}]}
        p["extra"] = {"sched": collections.OrderedDict(a=1.5)}
        ckpt.save(self.dir, p, {})
        got = ckpt.load(self.dir, "j")
        g = got["optimizer"]["param_groups"][0]
        self.assertEqual(g["betas"], (0.9, 0.99))
        self.assertEqual(g["lr"], 0.1)
        self.assertEqual(g["inf"], float("inf"))
        self.assertIsNone(g["x"])
        self.assertTrue(torch.equal(
            got["optimizer"]["state"][0]["momentum_buffer"], torch.ones(2)))
        self.assertEqual(got["extra"]["sched"]["a"], 1.5)

    def test_failed_save_keeps_the_good_one(self):
        ckpt.save(self.dir, payload(value=1.0), {"epoch": 1})
        before = read(self.path)
        bad = payload()
        bad["model"]["f"] = lambda: 0  # cannot be pickled
        with self.assertRaises(ckpt.CheckpointError) as cm:
            ckpt.save(self.dir, bad, {"epoch": 9})
        self.assertIn(self.path, str(cm.exception))
        self.assertEqual(read(self.path), before)
        self.assertEqual(ckpt.read_summary(self.dir)["epoch"], 1)
        leftovers = [f for f in os.listdir(self.dir) if ".tmp" in f]
        self.assertEqual(leftovers, [])


if __name__ == "__main__":
    unittest.main()
