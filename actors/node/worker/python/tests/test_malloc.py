import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker import malloc  # noqa: E402


class FakeLibc:
    def __init__(self, ok=1):
        self.calls, self.ok = [], ok

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.ok


class NoMallopt:
    pass


class MallocTest(unittest.TestCase):
    def test_sets_both_thresholds(self):
        libc = FakeLibc()
        self.assertTrue(malloc.steady({}, load=lambda: libc))
        self.assertEqual(libc.calls, [
            (malloc.M_MMAP_THRESHOLD, malloc.MMAP_THRESHOLD),
            (malloc.M_TRIM_THRESHOLD, malloc.TRIM_THRESHOLD)])

    def test_user_setting_wins(self):
        libc = FakeLibc()
        self.assertFalse(malloc.steady({"MALLOC_MMAP_THRESHOLD_": "65536"},
                                       load=lambda: libc))
        self.assertEqual(libc.calls, [])

    def test_not_glibc(self):
        self.assertFalse(malloc.steady({}, load=lambda: NoMallopt()))

        def fail():
            raise OSError("no libc")
        self.assertFalse(malloc.steady({}, load=fail))

    def test_refused(self):
        self.assertFalse(malloc.steady({}, load=lambda: FakeLibc(ok=0)))

    def test_this_process(self):
        # On the glibc this runs on, the real call succeeds.
        if not os.path.exists("/lib/x86_64-linux-gnu/libc.so.6") and \
                not os.path.exists("/lib/aarch64-linux-gnu/libc.so.6"):
            self.skipTest("not a glibc system")
        self.assertTrue(malloc.steady({}))


if __name__ == "__main__":
    unittest.main()
