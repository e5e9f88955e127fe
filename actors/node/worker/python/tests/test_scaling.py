import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker import scaling  # noqa: E402


class ScalingTest(unittest.TestCase):
    def test_factors(self):
        # A step of 4 M0 with an AdaScale gain of 2.5.
        self.assertEqual(scaling.AdaScale().factor(4, 2.5, 0), 2.5)
        self.assertEqual(scaling.LinearScale().factor(4, 2.5, 0), 4)
        self.assertEqual(scaling.SqrtScale().factor(4, 2.5, 0), 2)
        for rule in (scaling.AdaScale(), scaling.LinearScale(),
                     scaling.SqrtScale()):
            self.assertEqual(rule.factor(1, 1, 7), 1, rule)

    def test_legw_warms_up_then_holds_sqrt(self):
        # 2 epochs of 1000 samples at M0 = 10: 200 steps at M0, times S.
        legw = scaling.LEGWScale(2, 1000, 10)
        self.assertAlmostEqual(legw.factor(1, 1, 0), 1 / 200)
        self.assertAlmostEqual(legw.factor(1, 1, 99), 0.5)
        self.assertAlmostEqual(legw.factor(4, 4, 396), 2 * 400 / 800)
        self.assertEqual(legw.factor(4, 4, 800), 2)
        self.assertEqual(legw.factor(4, 4, 1e9), 2)

    def test_rule_by_name(self):
        for name in ("adascale", "linear", "sqrt"):
            self.assertEqual(scaling.rule(name).name, name)
        legw = scaling.rule("legw", warmup_epochs=5, data_size=100,
                            init_bsz=8)
        self.assertIsInstance(legw, scaling.LEGWScale)
        with self.assertRaisesRegex(ValueError, "unknown learning-rate "
                                    "scaling 'cubic'"):
            scaling.rule("cubic")
        with self.assertRaisesRegex(ValueError, "legw needs"):
            scaling.rule("legw")
        for bad in ((0, 10, 8), (math.inf, 10, 8), (1, 0, 8), (1, 10, 0)):
            with self.assertRaises(ValueError):
                scaling.LEGWScale(*bad)


if __name__ == "__main__":
    unittest.main()
