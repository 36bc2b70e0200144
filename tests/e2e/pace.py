"""How long the end-to-end tests wait for what they start.

A sanitized build (ctest sets GYM_SANITIZE) is 5-20 times slower, and CI runs
these tests beside each other on two cores: there a sanitized exporter with
its 1,024 HTTP workers takes seconds to answer one request or to stop. The
waits are bounds on a hang, not expectations of speed; no test asserts on
how long anything took beyond them."""
import os

SANITIZED = bool(os.environ.get("GYM_SANITIZE"))
# How the tests' registries in /dev/shm start: the run's own prefix, which
# scripts/test.sh checks nothing is left with.
SHM_PREFIX = os.environ.get("GYM_TEST_SHM_PREFIX", "gym-test-")
# One HTTP request (connect, send, read the whole reply).
HTTP_S = 60 if SANITIZED else 10
# A process told to stop (SIGTERM) until it has exited.
STOP_S = 120 if SANITIZED else 20
