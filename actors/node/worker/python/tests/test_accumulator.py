import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker import Accumulator  # noqa: E402


class AccumulatorTest(unittest.TestCase):
    # Across replicas: test_parallel.py (ddp_worker.py's "accumulated").

    def test_pending_then_synchronized(self):
        acc = Accumulator()
        acc["loss"] += 2.5
        acc["loss"] += 1.5
        acc["n"] += 4
        self.assertEqual(acc["loss"], 4.0)  # this replica's pending
        with acc.synchronized():
            self.assertEqual(acc["loss"] / acc["n"], 1.0)
            self.assertEqual(acc.keys(), ["loss", "n"])
            with self.assertRaises(KeyError):
                acc["other"]
        self.assertEqual(acc["loss"], 0.0)  # nothing pending
        acc["loss"] += 6
        acc["n"] += 2
        with acc.synchronized():
            self.assertEqual(acc["loss"], 10.0)
            self.assertEqual(acc["n"], 6.0)
            acc["loss"] = acc["n"] = 0  # every replica alike
        with acc.synchronized():
            self.assertEqual((acc["loss"], acc["n"]), (0.0, 0.0))
            del acc["n"]
            self.assertNotIn("n", acc)

    def test_refusals(self):
        acc = Accumulator()
        with self.assertRaisesRegex(ValueError, "finite"):
            acc["x"] = math.nan
        with self.assertRaisesRegex(TypeError, "keys are strings"):
            acc[1] = 2
        with acc.synchronized():
            with self.assertRaisesRegex(RuntimeError, "inside"):
                with acc.synchronized():
                    pass

    def test_state_holds_the_job_wide_values(self):
        acc = Accumulator()
        acc["a"] += 3
        with acc.synchronized():
            pass
        acc["a"] += 100  # pending: not in the state
        other = Accumulator()
        other.load_state_dict(acc.state_dict())
        with other.synchronized():
            self.assertEqual(other["a"], 3.0)
        with self.assertRaises(ValueError):
            other.load_state_dict({"values": {"a": math.inf}})


if __name__ == "__main__":
    unittest.main()
