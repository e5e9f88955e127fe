import json
import os
import socket
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pollux_worker import report  # noqa: E402

GOOD = {"job": "j1", "incarnation": 3, "rank": 0, "step_time": 0.5,
        "sync_time": 0.1, "grad_sqr": 2.0, "grad_var": 40.0, "epoch": 1,
        "progress": 120.5, "local_bsz": 64, "accum_steps": 1}


class Server:
    """A listener on 127.0.0.1 collecting lines; close_after closes each
    connection after that many lines."""

    def __init__(self, close_after=None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self.lines, self.conns = [], 0
        self.close_after = close_after
        self.cv = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.cv:
                self.conns += 1
            threading.Thread(target=self._serve, args=(c,),
                             daemon=True).start()

    def _serve(self, c):
        n = 0
        with c, c.makefile("rb") as f:
            for line in f:
                with self.cv:
                    self.lines.append(json.loads(line))
                    self.cv.notify_all()
                n += 1
                if self.close_after and n >= self.close_after:
                    return

    def wait(self, n, timeout=5):
        with self.cv:
            self.cv.wait_for(lambda: len(self.lines) >= n, timeout=timeout)
            return list(self.lines)

    def close(self):
        self.sock.close()


class ReportTest(unittest.TestCase):
    def test_validate_mirrors_the_go_decoder(self):
        report.validate(GOOD)
        bad = [("step_time", 0), ("sync_time", -0.1), ("sync_time", 0.6),
               ("grad_sqr", float("nan")), ("grad_var", float("inf")),
               ("progress", -1.0), ("epoch", -1), ("local_bsz", 0),
               ("accum_steps", -1), ("rank", -1), ("incarnation", 1.5),
               ("step_time", "0.5"), ("step_time", True)]
        for k, v in bad:
            with self.subTest(field=k, value=v):
                with self.assertRaises(report.ReportError) as cm:
                    report.validate(dict(GOOD, **{k: v}))
                self.assertIn(k, str(cm.exception))
        with self.assertRaises(report.ReportError):
            report.validate({k: v for k, v in GOOD.items() if k != "job"})

    def test_checkpoint_mirrors_the_go_decoder(self):
        ck = {"epoch": 2, "progress": 210.5, "saved_at": 1796000000.25}
        report.validate(dict(GOOD, checkpoint=ck))
        bad = [dict(ck, epoch=-1), dict(ck, progress=float("nan")),
               dict(ck, saved_at=0), dict(ck, path="/x"), 7,
               {k: v for k, v in ck.items() if k != "saved_at"}]
        for c in bad:
            with self.subTest(checkpoint=c):
                with self.assertRaises(report.ReportError) as cm:
                    report.validate(dict(GOOD, checkpoint=c))
                self.assertIn("checkpoint", str(cm.exception))

    def test_encode_is_one_line(self):
        b = report.encode(dict(GOOD, done=True))
        self.assertTrue(b.endswith(b"\n"))
        self.assertEqual(b.count(b"\n"), 1)
        self.assertEqual(json.loads(b), dict(GOOD, done=True))
        self.assertEqual(json.loads(report.encode(GOOD, token="s3"))["token"],
                         "s3")

    def test_nan_statistics_are_never_sent(self):
        srv = Server()
        self.addCleanup(srv.close)
        r = report.Reporter(srv.addr)
        self.addCleanup(r.close)
        with self.assertLogs("pollux_worker", "ERROR") as logs:
            self.assertFalse(r.send(dict(GOOD, grad_sqr=float("nan"))))
        self.assertIn("grad_sqr", logs.output[0])
        self.assertTrue(r.send(GOOD))
        got = srv.wait(1)
        self.assertEqual(got, [GOOD])
        self.assertEqual((r.sent, r.dropped), (1, 1))

    def test_reconnects(self):
        srv = Server(close_after=1)
        self.addCleanup(srv.close)
        r = report.Reporter(srv.addr)
        self.addCleanup(r.close)
        # A line written into a connection the peer has just closed is
        # lost (reports are measurements); the next write fails and the
        # reporter connects again.
        for i in range(200):
            r.send(dict(GOOD, epoch=i))
            if len(srv.wait(3, timeout=0.02)) >= 3:
                break
        self.assertGreaterEqual(len(srv.wait(3)), 3)
        self.assertGreaterEqual(srv.conns, 3)

    def test_final_report_waits_for_the_listener(self):
        # The listener comes up while the worker is in its back-off.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        r = report.Reporter("127.0.0.1:%d" % port)
        self.addCleanup(r.close)
        with self.assertLogs("pollux_worker", "WARNING"):
            self.assertFalse(r.send(GOOD))
        s.listen()
        got = []

        def accept():
            c, _ = s.accept()
            with c, c.makefile("rb") as f:
                got.extend(json.loads(line) for line in f)
        t = threading.Thread(target=accept, daemon=True)
        t.start()
        self.assertTrue(r.send_final(dict(GOOD, done=True)))
        r.close()
        t.join(5)
        s.close()
        self.assertEqual(got, [dict(GOOD, done=True)])

    def test_unreachable_is_not_an_error(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        s.close()  # nothing listens there now
        now = [0.0]
        r = report.Reporter(addr, clock=lambda: now[0])
        with self.assertLogs("pollux_worker", "WARNING"):
            self.assertFalse(r.send(GOOD))
        # Within the back-off no connection is attempted (no log).
        self.assertFalse(r.send(GOOD))
        self.assertEqual(r.dropped, 2)


if __name__ == "__main__":
    unittest.main()
