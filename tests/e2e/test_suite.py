"""The suite's own hygiene: scripts/test.sh checks that the run left nothing
in /dev/shm, and only what the run made counts (its registries are named
with the run's prefix, GYM_TEST_SHM_PREFIX), not what a Gym server or
another checkout's tests make meanwhile."""
import os
import subprocess

SOURCE = os.environ.get("GYM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SOURCE, "scripts", "shm-leftovers.sh")


def leftovers(prefix, shm):
    return subprocess.run(["bash", SCRIPT, prefix, str(shm)], capture_output=True, text=True,
                          timeout=30)


def test_only_what_has_the_runs_prefix_is_a_leftover(tmp_path):
    (tmp_path / "gym-metrics").mkdir()  # a Gym server's registry
    (tmp_path / "gym-test-1-99-stat-x").mkdir()  # another run's
    (tmp_path / "gym-load-abc").mkdir()  # a benchmark's, meanwhile
    clean = leftovers("gym-test-1-42-", tmp_path)
    assert clean.returncode == 0, clean.stderr
    (tmp_path / "gym-test-1-42-stat-abc").mkdir()
    (tmp_path / "gym-test-1-42-pytest-def").mkdir()
    left = leftovers("gym-test-1-42-", tmp_path)
    assert left.returncode == 1
    assert "gym-test-1-42-stat-abc" in left.stderr and "gym-test-1-42-pytest-def" in left.stderr
    assert "gym-metrics" not in left.stderr and "99-stat" not in left.stderr
    assert "gym-load" not in left.stderr


def test_a_prefix_that_is_no_plain_name_start_is_refused(tmp_path):
    for bad in ("", "gym-*", "a/b"):
        r = leftovers(bad, tmp_path)
        assert r.returncode == 2, (bad, r.stderr)


def test_the_suites_registries_carry_the_runs_prefix():
    """Under scripts/test.sh (which sets it): the Python tests' registry."""
    prefix = os.environ.get("GYM_TEST_SHM_PREFIX")
    if not prefix:
        return  # run by hand: nothing to check against
    import pace
    assert pace.SHM_PREFIX == prefix
