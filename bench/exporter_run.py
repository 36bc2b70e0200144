"""A gym-exporter for a benchmark: started on a registry with a configuration
of its own and an ephemeral port, stopped with SIGTERM, its files removed."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time


class Exporter:
    def __init__(self, build, registry, config_text):
        self.dir = tempfile.mkdtemp(prefix="gym-bench-exporter-")
        cfg = os.path.join(self.dir, "gym.yml")
        with open(cfg, "w") as f:
            f.write(config_text)
        log = os.path.join(self.dir, "exporter.log")
        self.proc = subprocess.Popen(
            [f"{build}/exporter/gym-exporter", f"--config.file={cfg}",
             f"--registry.dir={registry}", "--web.listen-address=127.0.0.1:0"],
            stderr=open(log, "w"))
        self.port = None  # None: it did not say it listens (within 5 s)
        for _ in range(500):
            m = re.search(r"\(port (\d+)\)", open(log).read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.01)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
