/* The C ABI, compiled as C: every call's code, the error messages, and the
 * state it keeps. Exits non-zero on the first failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gym_metrics.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(void) {
  char dir[] = "/dev/shm/gym-c-abi-XXXXXX";
  if (mkdtemp(dir) == NULL) return 2;
  setenv("GYM_METRICS_DIR", dir, 1);

  gym_limit* limit = NULL;
  CHECK(gym_limit_open("agent_server", "rollouts", NULL, 2, -1.0, &limit) == GYM_OK);
  CHECK(limit != NULL);
  CHECK(gym_limit_acquired(limit) == GYM_OK);
  CHECK(gym_limit_wait_started(limit) == GYM_OK);
  CHECK(gym_limit_queued(limit) == 1);
  CHECK(gym_limit_wait_admitted(limit) == GYM_OK);
  CHECK(gym_limit_active(limit) == 2);
  CHECK(gym_limit_queued(limit) == 0);
  CHECK(gym_limit_acquired(limit) == GYM_ESTATE); /* all slots held */
  CHECK(strstr(gym_last_error(), "held") != NULL);
  CHECK(gym_limit_wait_started(limit) == GYM_OK);
  CHECK(gym_limit_wait_cancelled(limit) == GYM_OK);
  CHECK(gym_limit_wait_timed_out(limit) == GYM_ESTATE); /* nobody waits */
  CHECK(gym_limit_released(limit) == GYM_OK);
  CHECK(gym_limit_released(limit) == GYM_OK);
  CHECK(gym_limit_released(limit) == GYM_ESTATE); /* over-release */
  CHECK(gym_limit_active(limit) == 0);
  gym_limit_close(limit);

  gym_limit* bad = NULL;
  CHECK(gym_limit_open("bogus", "rollouts", NULL, 2, -1.0, &bad) == GYM_EINVAL);
  CHECK(strstr(gym_last_error(), "bogus") != NULL);
  CHECK(gym_limit_open("agent_server", "Bad-Name", NULL, 2, -1.0, &bad) == GYM_EINVAL);
  CHECK(strstr(gym_last_error(), "Bad-Name") != NULL);
  CHECK(gym_limit_open("agent_server", "rollouts", NULL, 0, -1.0, &bad) == GYM_EINVAL);
  CHECK(gym_limit_open("agent_server", "rollouts", "", 1, -1.0, &bad) == GYM_EINVAL);
  CHECK(gym_limit_open(NULL, "rollouts", NULL, 1, -1.0, &bad) == GYM_EINVAL);
  CHECK(bad == NULL);
  CHECK(gym_limit_released(NULL) == GYM_EINVAL);
  CHECK(gym_limit_active(NULL) == -1);

  CHECK(gym_declare_server("math", "resources_server") == GYM_OK);
  CHECK(gym_declare_server("", "resources_server") == GYM_EINVAL);
  CHECK(gym_operation_queued("verify", "subprocess") == GYM_OK);
  CHECK(gym_operation_started("verify", "subprocess", 0.25) == GYM_OK);
  CHECK(gym_operation_finished("verify", "subprocess", 1.5, "timeout") == GYM_OK);
  CHECK(gym_operation_finished("verify", "subprocess", 1.5, "exploded") == GYM_EINVAL);
  CHECK(strstr(gym_last_error(), "exploded") != NULL);
  CHECK(gym_operation_started("verify", "subprocess", -1.0) == GYM_EINVAL);
  CHECK(gym_operation_started("verify", "subprocess", NAN) == GYM_EINVAL);
  CHECK(gym_operation_queued("dance", "inline") == GYM_EINVAL);
  CHECK(gym_operation_queued("tool", "teleport") == GYM_EINVAL);

  /* By kind: integers only. */
  int kind = gym_operation_kind("judge", "thread");
  CHECK(kind >= 0);
  CHECK(gym_operation_kind("judge", "thread") == kind);
  CHECK(gym_operation_kind("verify", "thread") != kind);
  CHECK(gym_operation_kind("dance", "thread") == -GYM_EINVAL);
  CHECK(strstr(gym_last_error(), "dance") != NULL);
  CHECK(gym_operation_kind(NULL, "thread") == -GYM_EINVAL);
  int64_t wait = 0, run = 0;
  CHECK(gym_operation_started_k(kind, 10, 0, &run) == GYM_ESTATE); /* nothing queued */
  CHECK(gym_operation_queued_k(kind, &wait) == GYM_OK);
  CHECK(gym_operation_started_k(kind, -1, wait, &run) == GYM_EINVAL);
  CHECK(gym_operation_started_k(kind, 2000000, wait, &run) == GYM_OK);
  CHECK(gym_operation_finished_k(kind, 5, 99, run) == GYM_EINVAL);
  CHECK(gym_operation_finished_k(kind, 5, GYM_OUTCOME_CRASHED, run) == GYM_OK);
  CHECK(gym_operation_finished_k(kind, 5, GYM_OUTCOME_OK, run) == GYM_ESTATE); /* none runs */
  CHECK(gym_operation_queued_k(-1, &wait) == GYM_EINVAL);
  CHECK(gym_operation_queued_k(1000, &wait) == GYM_EINVAL);
  CHECK(gym_operation_queued_k(kind, &wait) == GYM_OK);
  CHECK(gym_operation_dequeued_k(kind, wait) == GYM_OK);
  CHECK(gym_operation_dequeued_k(kind, wait) == GYM_ESTATE);

  /* The runtime: a loop's and the process's handles. */
  gym_loop* loop = NULL;
  gym_runtime* runtime = NULL;
  CHECK(gym_loop_open("", &loop) == GYM_EINVAL);
  CHECK(loop == NULL);
  CHECK(gym_loop_open(NULL, NULL) == GYM_EINVAL);
  CHECK(gym_loop_open(NULL, &loop) == GYM_OK); /* the declared server, "math" */
  CHECK(gym_loop_beat(loop, 1000, 350000000) == GYM_OK);
  CHECK(gym_loop_beat(loop, -5, -5) == GYM_OK); /* negatives count as 0 */
  CHECK(gym_loop_tasks(loop, 12) == GYM_OK);
  CHECK(gym_loop_beat(NULL, 0, 0) == GYM_EINVAL);
  CHECK(gym_loop_tasks(NULL, 1) == GYM_EINVAL);
  CHECK(gym_runtime_open("judge", &runtime) == GYM_OK);
  CHECK(gym_runtime_gc(runtime, 2, 5000000) == GYM_OK);
  CHECK(gym_runtime_gc(runtime, 3, 5000000) == GYM_EINVAL);
  CHECK(strstr(gym_last_error(), "generation 3") != NULL);
  CHECK(gym_runtime_gc(NULL, 0, 1) == GYM_EINVAL);
  CHECK(gym_runtime_threads(runtime, 4) == GYM_OK);
  CHECK(gym_runtime_threads(NULL, 4) == GYM_EINVAL);
  gym_loop_close(loop);
  gym_runtime_close(runtime);
  gym_loop_close(NULL);
  gym_runtime_close(NULL);

  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) ++failures;
  printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
