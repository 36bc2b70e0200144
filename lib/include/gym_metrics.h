/* gym_metrics.h: the C ABI of libgymmetrics, for Python and other languages.
 *
 * Only C types cross it and no exception does: every call returns GYM_OK or
 * an error code, and gym_last_error() returns the message of the calling
 * thread's last failure. Metric semantics are those of the C++ primitives
 * (gym/metered_semaphore.h, gym/resources_operation.h,
 * gym/server_identity.h), so a language with its own semaphore (asyncio's)
 * reports the same numbers by telling the library what happened.
 *
 * API (docs/api.md): all of it.
 *
 * Thread-safety: every call may be made from any thread. */
#ifndef GYM_METRICS_H
#define GYM_METRICS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GYM_OK 0
#define GYM_EINVAL 1 /* an argument outside its set or limits */
#define GYM_ESTATE 2 /* an event that does not fit the state, e.g. a release with no slot held */
#define GYM_ENOMEM 3 /* out of memory */

typedef struct gym_limit gym_limit;

/* Opens a concurrency limit. component: rollout_driver, agent_server,
 * model_server, resources_server or other. limit_name: [a-z][a-z0-9_]*, at
 * most 64 characters. server_name: NULL or 1 to 128 bytes. admission_timeout_s:
 * negative for none (then no timeouts series exists). */
int gym_limit_open(const char* component, const char* limit_name, const char* server_name,
                   int64_t limit, double admission_timeout_s, gym_limit** out);
/* Closes it: its gauges stop reporting at the next scrape, counters stay. */
void gym_limit_close(gym_limit* limit);

/* Tickets. Each event that starts a wait or a hold gives a ticket (an
 * int64) for the event that ends it, so that the ages of the oldest waiter and
 * holder (gym_concurrency_oldest_*_seconds) follow the right caller. A ticket
 * of 0 (unknown) ends another one instead: counts stay right, only which
 * start is kept differs. The calls without tickets below do that. */

/* A caller took a slot without waiting; *hold: the hold's ticket. */
int gym_limit_acquired_t(gym_limit* limit, int64_t* hold);
/* A caller started waiting for a slot; *wait: the wait's ticket. */
int gym_limit_wait_started_t(gym_limit* limit, int64_t* wait);
/* The waiter of `wait` got a slot; *hold: the hold's ticket. GYM_ESTATE,
 * changing nothing, when nobody waits or every slot is held. */
int gym_limit_wait_admitted_t(gym_limit* limit, int64_t wait, int64_t* hold);
/* The waiter of `wait` ran out of the admission timeout. GYM_ESTATE,
 * changing nothing, when nobody waits (so for the next one). */
int gym_limit_wait_timed_out_t(gym_limit* limit, int64_t wait);
/* The waiter of `wait` was cancelled before a slot was free. */
int gym_limit_wait_cancelled_t(gym_limit* limit, int64_t wait);
/* The holder of `hold` returned its slot. GYM_ESTATE, changing nothing, when
 * none is held. */
int gym_limit_released_t(gym_limit* limit, int64_t hold);
/* The holder of `hold` handed its slot straight to the waiter of `wait` (a
 * semaphore that wakes a waiter with the slot, as asyncio's does): the slot
 * never shows as free and the queue shrinks by one; *next: the new hold's
 * ticket. GYM_ESTATE, changing nothing, when nobody waits or no slot is held. */
int gym_limit_handed_off_t(gym_limit* limit, int64_t hold, int64_t wait, int64_t* next);

/* Exemplars: the same ends of a wait with the trace context of the caller
 * (OpenTelemetry's SpanContext: trace_id 16 bytes, span_id 8, big-endian as
 * W3C writes them in hex): the wait becomes its wait-duration bucket's
 * exemplar, which OpenMetrics and protobuf scrapes carry. NULL, or an id of
 * all zeros, records none (as the calls above). */
int gym_limit_wait_admitted_x(gym_limit* limit, int64_t wait, int64_t* hold,
                              const uint8_t* trace_id, const uint8_t* span_id);
int gym_limit_wait_timed_out_x(gym_limit* limit, int64_t wait, const uint8_t* trace_id,
                               const uint8_t* span_id);
int gym_limit_wait_cancelled_x(gym_limit* limit, int64_t wait, const uint8_t* trace_id,
                               const uint8_t* span_id);
int gym_limit_handed_off_x(gym_limit* limit, int64_t hold, int64_t wait, int64_t* next,
                           const uint8_t* trace_id, const uint8_t* span_id);

/* The same events without tickets (ticket 0): a wait admitted, timed out or
 * cancelled this way is recorded in the wait histogram as 0 s. */
int gym_limit_acquired(gym_limit* limit);
int gym_limit_wait_started(gym_limit* limit);
int gym_limit_wait_admitted(gym_limit* limit);
int gym_limit_wait_timed_out(gym_limit* limit);
int gym_limit_wait_cancelled(gym_limit* limit);
int gym_limit_released(gym_limit* limit);
/* Slots held and callers waiting now (-1 for a NULL limit). */
int64_t gym_limit_active(const gym_limit* limit);
int64_t gym_limit_queued(const gym_limit* limit);

/* Resources operations. operation: verify, tool, judge or other. executor:
 * inline, thread, process, subprocess or other. outcome: ok, error, timeout,
 * cancelled or crashed. */
int gym_operation_queued(const char* operation, const char* executor);
/* A queued operation that will not start (cancelled while waiting): its
 * wait is recorded as cancelled (gym_operation_abandoned_k says how long and
 * how it ended). dequeued and started need a queued operation of the same
 * kind in this process, finished a started one: otherwise GYM_ESTATE,
 * changing nothing. */
int gym_operation_dequeued(const char* operation, const char* executor);
int gym_operation_started(const char* operation, const char* executor, double queue_seconds);
int gym_operation_finished(const char* operation, const char* executor, double duration_seconds,
                           const char* outcome);
/* The same with tickets, for the ages of the oldest queued and active
 * operation (gym_resources_operation_oldest_*_seconds): queued gives the
 * wait's ticket, which dequeued or started take; started gives the run's,
 * which finished takes. */
int gym_operation_queued_t(const char* operation, const char* executor, int64_t* queued);
int gym_operation_dequeued_t(const char* operation, const char* executor, int64_t queued);
int gym_operation_started_t(const char* operation, const char* executor, double queue_seconds,
                            int64_t queued, int64_t* active);
int gym_operation_finished_t(const char* operation, const char* executor, double duration_seconds,
                             const char* outcome, int64_t active);

/* The same events by kind, for callers that report many operations: a kind
 * names an (operation, executor) pair once (gym_operation_kind: >= 0, or
 * minus an error code, e.g. -GYM_EINVAL, for an unknown name), outcomes are
 * GYM_OUTCOME_* and durations integer nanoseconds, so that no call parses a
 * string or rounds a double. Same rules and tickets as above; an unknown
 * kind or outcome, or a negative duration, is GYM_EINVAL. */
#define GYM_OUTCOME_OK 0
#define GYM_OUTCOME_ERROR 1
#define GYM_OUTCOME_TIMEOUT 2
#define GYM_OUTCOME_CANCELLED 3
#define GYM_OUTCOME_CRASHED 4
int gym_operation_kind(const char* operation, const char* executor);
int gym_operation_queued_k(int kind, int64_t* queued);
int gym_operation_dequeued_k(int kind, int64_t queued);
/* A queued operation that will not start, its wait of queue_ns ended by
 * `outcome`: GYM_OUTCOME_TIMEOUT (an admission timeout) or
 * GYM_OUTCOME_CANCELLED (anything else; another outcome is GYM_EINVAL).
 * Recorded in the queue duration histogram with
 * nemo_gym_concurrency_wait_outcome, so that every wait that ended adds its
 * time (what dequeued does, measured from the ticket). */
int gym_operation_abandoned_k(int kind, int64_t queue_ns, int outcome, int64_t queued);
int gym_operation_started_k(int kind, int64_t queue_ns, int64_t queued, int64_t* active);
int gym_operation_finished_k(int kind, int64_t duration_ns, int outcome, int64_t active);
/* The same with the operation's trace context (as the _x calls of a limit):
 * its duration becomes its bucket's exemplar. */
int gym_operation_finished_kx(int kind, int64_t duration_ns, int outcome, int64_t active,
                              const uint8_t* trace_id, const uint8_t* span_id);

/* Declares which Gym server this process is. GYM_ESTATE, changing nothing,
 * after this process's first resources operation for any identity but the
 * one its operation series took (declare before the first operation). */
int gym_declare_server(const char* name, const char* server_type);

/* A language runtime's event loop and process (gym/runtime_meter.h): the
 * gym_python_* families. server_name NULL: the server this process declared,
 * if any (at open). Nothing here starts a thread or a timer: the loop's own
 * periodic probe calls gym_loop_beat. */
typedef struct gym_loop gym_loop;
typedef struct gym_runtime gym_runtime;
int gym_loop_open(const char* server_name, gym_loop** out);
/* Closes it: its lag histogram stays, its heartbeat and tasks stop reporting. */
void gym_loop_close(gym_loop* loop);
/* The loop's probe ran lag_ns late (negative: 0) and the next beat is due in
 * due_in_ns (the probe's interval plus a grace): from then until the next
 * beat, gym_python_event_loop_blocked_seconds counts how long it is overdue. */
int gym_loop_beat(gym_loop* loop, int64_t lag_ns, int64_t due_in_ns);
int gym_loop_tasks(gym_loop* loop, int64_t tasks);
int gym_runtime_open(const char* server_name, gym_runtime** out);
void gym_runtime_close(gym_runtime* runtime);
/* A garbage collection of `generation` (0, 1 or 2; else GYM_EINVAL) paused
 * the process for pause_ns. */
int gym_runtime_gc(gym_runtime* runtime, int generation, int64_t pause_ns);
int gym_runtime_threads(gym_runtime* runtime, int64_t threads);

/* The message of this thread's last failing call ("" if none). Valid until
 * the thread's next call. */
const char* gym_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* GYM_METRICS_H */
