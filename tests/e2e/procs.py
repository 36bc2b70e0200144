"""The processes an end-to-end test starts, stopped at its end (also on
failure), and waiting for what they do: shared by the e2e tests."""
import signal
import subprocess
import time

from pace import STOP_S


def stop_all(procs):
    """SIGTERM to each still running, then each waited for (STOP_S), and
    killed if it did not stop."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=STOP_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class Procs:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []

    def start(self, *argv, **kw):
        p = subprocess.Popen(list(argv), stdout=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def stop(self):
        stop_all(self.procs)


def until(what, check, seconds, detail=lambda: "", pause=0.2):
    """check()'s first true answer; after `seconds`, a failure that says what
    detail() finds."""
    deadline = time.time() + seconds
    while True:
        got = check()
        if got:
            return got
        if time.time() >= deadline:
            raise AssertionError(f"not within {seconds} s: {what}\n{detail()}")
        time.sleep(pause)
