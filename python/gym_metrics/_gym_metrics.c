/* _gym_metrics: the CPython extension over libgymmetrics' C ABI
 * (gym_metrics.h). Errors become ValueError (bad argument) or RuntimeError
 * (an event that does not fit the state), with the library's message. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_gym_metrics.h"
#include "gym_metrics.h"

static const char* kCapsule = "gym_metrics.limit";

PyObject* gympy_raise_error(int rc) {
  PyErr_SetString(rc == GYM_EINVAL ? PyExc_ValueError : PyExc_RuntimeError, gym_last_error());
  return NULL;
}

static void close_limit(PyObject* capsule) {
  gym_limit* l = (gym_limit*)PyCapsule_GetPointer(capsule, kCapsule);
  if (l != NULL) gym_limit_close(l);
}

static PyObject* limit_open(PyObject* self, PyObject* args) {
  const char *component, *limit_name, *server_name;
  long long limit;
  double timeout;
  (void)self;
  if (!PyArg_ParseTuple(args, "sszLd", &component, &limit_name, &server_name, &limit, &timeout))
    return NULL;
  gym_limit* l = NULL;
  int rc = gym_limit_open(component, limit_name, server_name, (int64_t)limit, timeout, &l);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  return PyCapsule_New(l, kCapsule, close_limit);
}

static gym_limit* limit_of(PyObject* capsule) {
  return (gym_limit*)PyCapsule_GetPointer(capsule, kCapsule);
}

/* Events that start a wait or a hold take the handle alone (METH_O: no
 * argument tuple to parse, as they are on every acquire) and return the
 * ticket; those that end one take (handle, ticket). */
#define LIMIT_START(name, call)                              \
  static PyObject* name(PyObject* self, PyObject* capsule) { \
    (void)self;                                              \
    gym_limit* l = limit_of(capsule);                        \
    if (l == NULL) return NULL;                              \
    int64_t ticket = 0;                                      \
    int rc = call(l, &ticket);                               \
    if (rc != GYM_OK) return gympy_raise_error(rc);          \
    return PyLong_FromLongLong((long long)ticket);           \
  }

#define LIMIT_END(name, call)                                                  \
  static PyObject* name(PyObject* self, PyObject* const* args, Py_ssize_t n) { \
    (void)self;                                                                \
    if (n != 2) {                                                              \
      PyErr_SetString(PyExc_TypeError, #name "(handle, ticket)");              \
      return NULL;                                                             \
    }                                                                          \
    gym_limit* l = limit_of(args[0]);                                          \
    if (l == NULL) return NULL;                                                \
    long long ticket = PyLong_AsLongLong(args[1]);                             \
    if (ticket == -1 && PyErr_Occurred()) return NULL;                         \
    int rc = call(l, (int64_t)ticket);                                         \
    if (rc != GYM_OK) return gympy_raise_error(rc);                            \
    Py_RETURN_NONE;                                                            \
  }

LIMIT_START(limit_acquired, gym_limit_acquired_t)
LIMIT_START(limit_wait_started, gym_limit_wait_started_t)
LIMIT_END(limit_released, gym_limit_released_t)

/* A wait that got no slot ends (handle, wait[, trace_id, span_id]): with a
 * trace context the failed wait is its bucket's exemplar, as an admitted one
 * is (the slow wait that failed is the one whose trace a user wants). */
#define WAIT_FAILED(name, call)                                                              \
  static PyObject* name(PyObject* self, PyObject* const* args, Py_ssize_t n) {               \
    (void)self;                                                                              \
    const uint8_t *trace_id = NULL, *span_id = NULL;                                         \
    if (n != 2 && n != 4) {                                                                  \
      PyErr_SetString(PyExc_TypeError, #name "(handle, wait[, trace_id, span_id])");         \
      return NULL;                                                                           \
    }                                                                                        \
    if (n == 4 && gympy_trace_args(args[2], args[3], &trace_id, &span_id) != 0) return NULL; \
    gym_limit* l = limit_of(args[0]);                                                        \
    if (l == NULL) return NULL;                                                              \
    long long wait = PyLong_AsLongLong(args[1]);                                             \
    if (wait == -1 && PyErr_Occurred()) return NULL;                                         \
    int rc = call(l, (int64_t)wait, trace_id, span_id);                                      \
    if (rc != GYM_OK) return gympy_raise_error(rc);                                          \
    Py_RETURN_NONE;                                                                          \
  }

static PyObject* limit_wait_admitted(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  (void)self;
  if (n != 2) {
    PyErr_SetString(PyExc_TypeError, "limit_wait_admitted(handle, wait)");
    return NULL;
  }
  gym_limit* l = limit_of(args[0]);
  if (l == NULL) return NULL;
  long long wait = PyLong_AsLongLong(args[1]);
  if (wait == -1 && PyErr_Occurred()) return NULL;
  int64_t hold = 0;
  int rc = gym_limit_wait_admitted_t(l, (int64_t)wait, &hold);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  return PyLong_FromLongLong((long long)hold);
}

/* A trace context from two arguments: bytes of 16 (trace id) and 8 (span
 * id), or None and None for none. 0 on success. */
int gympy_trace_args(PyObject* trace, PyObject* span, const uint8_t** trace_id,
                     const uint8_t** span_id) {
  *trace_id = NULL;
  *span_id = NULL;
  if (trace == Py_None && span == Py_None) return 0;
  if (!PyBytes_Check(trace) || PyBytes_GET_SIZE(trace) != 16 || !PyBytes_Check(span) ||
      PyBytes_GET_SIZE(span) != 8) {
    PyErr_SetString(PyExc_TypeError, "a trace context is 16 bytes and 8 bytes, or None and None");
    return -1;
  }
  *trace_id = (const uint8_t*)PyBytes_AS_STRING(trace);
  *span_id = (const uint8_t*)PyBytes_AS_STRING(span);
  return 0;
}

WAIT_FAILED(limit_wait_timed_out, gym_limit_wait_timed_out_x)
WAIT_FAILED(limit_wait_cancelled, gym_limit_wait_cancelled_x)

/* (handle, hold, wait[, trace_id, span_id]) -> the new hold's ticket */
static PyObject* limit_handed_off(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  (void)self;
  if (n != 3 && n != 5) {
    PyErr_SetString(PyExc_TypeError, "limit_handed_off(handle, hold, wait[, trace_id, span_id])");
    return NULL;
  }
  const uint8_t *trace_id = NULL, *span_id = NULL;
  if (n == 5 && gympy_trace_args(args[3], args[4], &trace_id, &span_id) != 0) return NULL;
  gym_limit* l = limit_of(args[0]);
  if (l == NULL) return NULL;
  long long hold = PyLong_AsLongLong(args[1]);
  if (hold == -1 && PyErr_Occurred()) return NULL;
  long long wait = PyLong_AsLongLong(args[2]);
  if (wait == -1 && PyErr_Occurred()) return NULL;
  int64_t next = 0;
  int rc = gym_limit_handed_off_x(l, (int64_t)hold, (int64_t)wait, &next, trace_id, span_id);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  return PyLong_FromLongLong((long long)next);
}

/* Operations, by kind (operation_kind(operation, executor) names the pair
 * once): queued returns the wait's ticket; dequeued takes it; started takes
 * it and returns the run's ticket; finished takes that. Durations in integer
 * nanoseconds, outcomes as GYM_OUTCOME_* numbers. */
static PyObject* operation_kind(PyObject* self, PyObject* args) {
  const char *op, *ex;
  (void)self;
  if (!PyArg_ParseTuple(args, "ss", &op, &ex)) return NULL;
  int kind = gym_operation_kind(op, ex);
  if (kind < 0) return gympy_raise_error(-kind);
  return PyLong_FromLong(kind);
}

/* The integer arguments of a fast call, checked. */
static int int_args(PyObject* const* args, Py_ssize_t n, Py_ssize_t want, long long* out) {
  if (n != want) {
    PyErr_Format(PyExc_TypeError, "expected %zd arguments, got %zd", want, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    out[i] = PyLong_AsLongLong(args[i]);
    if (out[i] == -1 && PyErr_Occurred()) return -1;
  }
  return 0;
}

static PyObject* operation_queued(PyObject* self, PyObject* arg) {
  (void)self;
  long kind = PyLong_AsLong(arg);
  if (kind == -1 && PyErr_Occurred()) return NULL;
  int64_t ticket = 0;
  int rc = gym_operation_queued_k((int)kind, &ticket);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  return PyLong_FromLongLong((long long)ticket);
}

static PyObject* operation_dequeued(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  long long a[2];
  (void)self;
  if (int_args(args, n, 2, a) != 0) return NULL;
  int rc = gym_operation_dequeued_k((int)a[0], (int64_t)a[1]);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  Py_RETURN_NONE;
}

/* (kind, queue_ns, queued ticket) -> the run's ticket */
static PyObject* operation_started(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  long long a[3];
  (void)self;
  if (int_args(args, n, 3, a) != 0) return NULL;
  int64_t ticket = 0;
  int rc = gym_operation_started_k((int)a[0], (int64_t)a[1], (int64_t)a[2], &ticket);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  return PyLong_FromLongLong((long long)ticket);
}

/* (kind, duration_ns, outcome, active ticket[, trace_id, span_id]) */
static PyObject* operation_finished(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  long long a[4];
  (void)self;
  const uint8_t *trace_id = NULL, *span_id = NULL;
  if (n == 6) {
    if (gympy_trace_args(args[4], args[5], &trace_id, &span_id) != 0) return NULL;
    n = 4;
  }
  if (int_args(args, n, 4, a) != 0) return NULL;
  int rc = gym_operation_finished_kx((int)a[0], (int64_t)a[1], (int)a[2], (int64_t)a[3], trace_id,
                                     span_id);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  Py_RETURN_NONE;
}

static PyObject* declare_server(PyObject* self, PyObject* args) {
  const char *name, *type;
  (void)self;
  if (!PyArg_ParseTuple(args, "ss", &name, &type)) return NULL;
  int rc = gym_declare_server(name, type);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  Py_RETURN_NONE;
}

/* The runtime: a loop's handle ("gym_metrics.loop") and the process's
 * ("gym_metrics.runtime"), opened with a server name or None (the declared
 * server). */
static const char* kLoopCapsule = "gym_metrics.loop";
static const char* kRuntimeCapsule = "gym_metrics.runtime";

static void close_loop(PyObject* capsule) {
  gym_loop* l = (gym_loop*)PyCapsule_GetPointer(capsule, kLoopCapsule);
  if (l != NULL) gym_loop_close(l);
}

static void close_runtime(PyObject* capsule) {
  gym_runtime* r = (gym_runtime*)PyCapsule_GetPointer(capsule, kRuntimeCapsule);
  if (r != NULL) gym_runtime_close(r);
}

static PyObject* loop_open(PyObject* self, PyObject* args) {
  const char* server_name;
  (void)self;
  if (!PyArg_ParseTuple(args, "z", &server_name)) return NULL;
  gym_loop* l = NULL;
  int rc = gym_loop_open(server_name, &l);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  return PyCapsule_New(l, kLoopCapsule, close_loop);
}

static PyObject* runtime_open(PyObject* self, PyObject* args) {
  const char* server_name;
  (void)self;
  if (!PyArg_ParseTuple(args, "z", &server_name)) return NULL;
  gym_runtime* r = NULL;
  int rc = gym_runtime_open(server_name, &r);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  return PyCapsule_New(r, kRuntimeCapsule, close_runtime);
}

/* (handle, lag_ns, interval_ns) */
static PyObject* loop_beat(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  long long a[2];
  (void)self;
  if (n != 3) {
    PyErr_SetString(PyExc_TypeError, "loop_beat(handle, lag_ns, interval_ns)");
    return NULL;
  }
  gym_loop* l = (gym_loop*)PyCapsule_GetPointer(args[0], kLoopCapsule);
  if (l == NULL || int_args(args + 1, 2, 2, a) != 0) return NULL;
  int rc = gym_loop_beat(l, (int64_t)a[0], (int64_t)a[1]);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  Py_RETURN_NONE;
}

/* (loop handle, tasks, runtime handle, threads) */
static PyObject* loop_tasks(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  (void)self;
  if (n != 4) {
    PyErr_SetString(PyExc_TypeError, "loop_tasks(loop, tasks, runtime, threads)");
    return NULL;
  }
  gym_loop* l = (gym_loop*)PyCapsule_GetPointer(args[0], kLoopCapsule);
  if (l == NULL) return NULL;
  gym_runtime* r = (gym_runtime*)PyCapsule_GetPointer(args[2], kRuntimeCapsule);
  if (r == NULL) return NULL;
  long long tasks = PyLong_AsLongLong(args[1]);
  if (tasks == -1 && PyErr_Occurred()) return NULL;
  long long threads = PyLong_AsLongLong(args[3]);
  if (threads == -1 && PyErr_Occurred()) return NULL;
  int rc = gym_loop_tasks(l, (int64_t)tasks);
  if (rc == GYM_OK) rc = gym_runtime_threads(r, (int64_t)threads);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  Py_RETURN_NONE;
}

/* (handle, generation, pause_ns) */
static PyObject* runtime_gc(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  long long a[2];
  (void)self;
  if (n != 3) {
    PyErr_SetString(PyExc_TypeError, "runtime_gc(handle, generation, pause_ns)");
    return NULL;
  }
  gym_runtime* r = (gym_runtime*)PyCapsule_GetPointer(args[0], kRuntimeCapsule);
  if (r == NULL || int_args(args + 1, 2, 2, a) != 0) return NULL;
  if (a[0] < 0 || a[0] > 2) return gympy_raise_error(gym_runtime_gc(r, -1, 0));
  int rc = gym_runtime_gc(r, (int)a[0], (int64_t)a[1]);
  if (rc != GYM_OK) return gympy_raise_error(rc);
  Py_RETURN_NONE;
}

static PyMethodDef kMethods[] = {
    {"limit_open", limit_open, METH_VARARGS, "Open a concurrency limit; returns its handle."},
    {"limit_acquired", limit_acquired, METH_O, "A slot was taken without waiting; the hold."},
    {"limit_wait_started", limit_wait_started, METH_O, "A caller started waiting; the wait."},
    {"limit_wait_admitted", (PyCFunction)(void (*)(void))limit_wait_admitted, METH_FASTCALL,
     "(handle, wait): a waiting caller got a slot; the hold."},
    {"limit_wait_timed_out", (PyCFunction)(void (*)(void))limit_wait_timed_out, METH_FASTCALL,
     "(handle, wait[, trace_id, span_id]): a wait ran out of time."},
    {"limit_wait_cancelled", (PyCFunction)(void (*)(void))limit_wait_cancelled, METH_FASTCALL,
     "(handle, wait[, trace_id, span_id]): a wait was cancelled."},
    {"limit_released", (PyCFunction)(void (*)(void))limit_released, METH_FASTCALL,
     "(handle, hold): a slot was returned."},
    {"limit_handed_off", (PyCFunction)(void (*)(void))limit_handed_off, METH_FASTCALL,
     "(handle, hold, wait): a holder handed its slot to a waiter; the new hold."},
    {"operation_kind", operation_kind, METH_VARARGS,
     "(operation, executor) -> the kind the other operation calls take."},
    {"operation_queued", operation_queued, METH_O, "(kind): an operation waits; the wait."},
    {"operation_dequeued", (PyCFunction)(void (*)(void))operation_dequeued, METH_FASTCALL,
     "(kind, wait): a waiting operation gave up."},
    {"operation_started", (PyCFunction)(void (*)(void))operation_started, METH_FASTCALL,
     "(kind, queue_ns, wait): an operation entered its limit; the run."},
    {"operation_finished", (PyCFunction)(void (*)(void))operation_finished, METH_FASTCALL,
     "(kind, duration_ns, outcome, run): an operation left its limit."},
    {"declare_server", declare_server, METH_VARARGS, "Declare this process's server identity."},
    {"loop_open", loop_open, METH_VARARGS, "(server_name or None): an event loop's handle."},
    {"runtime_open", runtime_open, METH_VARARGS, "(server_name or None): the process's handle."},
    {"loop_beat", (PyCFunction)(void (*)(void))loop_beat, METH_FASTCALL,
     "(loop, lag_ns, interval_ns): the loop's probe ran lag_ns late; next in interval_ns."},
    {"loop_tasks", (PyCFunction)(void (*)(void))loop_tasks, METH_FASTCALL,
     "(loop, tasks, runtime, threads): tasks alive in the loop, threads in the process."},
    {"runtime_gc", (PyCFunction)(void (*)(void))runtime_gc, METH_FASTCALL,
     "(runtime, generation, pause_ns): a garbage collection paused the process."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kModule = {PyModuleDef_HEAD_INIT,
                                     "_gym_metrics",
                                     "libgymmetrics' C ABI.",
                                     -1,
                                     kMethods,
                                     NULL,
                                     NULL,
                                     NULL,
                                     NULL};

/* The project's version (CMake's project(... VERSION)), given by the build. */
#ifndef GYM_VERSION
#error "GYM_VERSION must be defined by the build"
#endif

PyMODINIT_FUNC PyInit__gym_metrics(void) {
  PyObject* m = PyModule_Create(&kModule);
  if (m != NULL && (PyModule_AddStringConstant(m, "__version__", GYM_VERSION) != 0 ||
                    gympy_add_operation_type(m) != 0)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
