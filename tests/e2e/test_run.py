"""scripts/run.sh, the README's first command, as a new user meets it."""
import os
import socket
import subprocess
import tempfile

import pytest

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("GYM_BUILD_DIR", os.path.join(SOURCE, "build"))


def test_a_busy_port_stops_run_sh_at_once_with_the_exporters_error():
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        busy.bind(("0.0.0.0", 9478))
    except OSError:
        pytest.skip("port 9478 is in use by another program here")
    busy.listen()
    with busy, tempfile.TemporaryDirectory(dir="/dev/shm") as registry:
        # Ten minutes to run: it must stop long before, as the exporter cannot listen.
        r = subprocess.run(["bash", os.path.join(SOURCE, "scripts", "run.sh")],
                           env={**os.environ, "GYM_RUN_SECONDS": "600",
                                "GYM_METRICS_DIR": registry, "GYM_BUILD_DIR": BUILD},
                           capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, r.stderr
    assert "cannot listen on :9478: address already in use" in r.stderr, r.stderr
    assert "gym-exporter stopped (exit status 1)" in r.stderr
