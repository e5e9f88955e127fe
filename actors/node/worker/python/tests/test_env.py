import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker import env  # noqa: E402

GOOD = {
    "POLLUX_JOB_ID": "digits-a", "POLLUX_INCARNATION": "7", "POLLUX_RANK": "1",
    "POLLUX_LOCAL_RANK": "1", "POLLUX_WORLD_SIZE": "2",
    "POLLUX_NUM_NODES": "1", "POLLUX_MASTER_ADDR": "127.0.0.1",
    "POLLUX_MASTER_PORT": "29500", "POLLUX_INIT_BSZ": "32",
    "POLLUX_ATOMIC_BSZ": "16", "POLLUX_ACCUM_STEPS": "1",
    "POLLUX_GAIN": "1.5", "POLLUX_CHECKPOINT_DIR": "/tmp/ck",
    "POLLUX_REPORT_ADDR": "127.0.0.1:7070", "CUDA_VISIBLE_DEVICES": "",
    "POLLUX_CPUS": "0,1",
}


class EnvTest(unittest.TestCase):
    def test_good(self):
        e = env.parse(GOOD)
        self.assertEqual((e.job_id, e.incarnation, e.rank, e.world_size),
                         ("digits-a", 7, 1, 2))
        self.assertEqual(e.total_bsz, 2 * 16 * 2)
        self.assertEqual(e.cpus, [0, 1])
        self.assertEqual(e.gpus, [])
        self.assertIsNone(e.report_ca)

    def test_report_token_file(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "token")
            with open(path, "w") as f:
                f.write("tok-123\n")
            e = env.parse(dict(GOOD, POLLUX_REPORT_TOKEN_FILE=path))
            self.assertEqual(e.report_token, "tok-123")
            for bad in ("token", os.path.join(d, "none")):
                with self.assertRaises(env.EnvError) as cm:
                    env.parse(dict(GOOD, POLLUX_REPORT_TOKEN_FILE=bad))
                self.assertIn("POLLUX_REPORT_TOKEN_FILE", str(cm.exception))

    def test_rejects_naming_the_variable(self):
        cases = [
            ("POLLUX_REPORT_ADDR", None),
            ("POLLUX_JOB_ID", None),
            ("POLLUX_RANK", "2"),
            ("POLLUX_RANK", "one"),
            ("POLLUX_LOCAL_RANK", "2"),
            ("POLLUX_NUM_NODES", "3"),
            ("POLLUX_MASTER_PORT", "70000"),
            ("POLLUX_ATOMIC_BSZ", "0"),
            ("POLLUX_ACCUM_STEPS", "-1"),
            ("POLLUX_GAIN", "nan"),
            ("POLLUX_GAIN", "inf"),
            ("POLLUX_GAIN", "0"),
            ("POLLUX_CHECKPOINT_DIR", "relative/dir"),
            ("POLLUX_REPORT_ADDR", "nowhere"),
            ("POLLUX_REPORT_ADDR", "host:0"),
            ("POLLUX_JOB_ID", "A B"),
            ("CUDA_VISIBLE_DEVICES", "0,x"),
            ("POLLUX_CPUS", "0,,1"),
            ("POLLUX_REPORT_CA", "/nonexistent/ca.pem"),
        ]
        for name, value in cases:
            with self.subTest(name=name, value=value):
                e = dict(GOOD)
                if value is None:
                    del e[name]
                else:
                    e[name] = value
                with self.assertRaises(env.EnvError) as cm:
                    env.parse(e)
                self.assertIn(name, str(cm.exception))

    def test_ipv6_report_addr(self):
        e = dict(GOOD, POLLUX_REPORT_ADDR="[::1]:7070")
        self.assertEqual(env.split_host_port(env.parse(e).report_addr, "x"),
                         ("::1", 7070))


if __name__ == "__main__":
    unittest.main()
