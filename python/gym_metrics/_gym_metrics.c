/* _gym_metrics: the CPython extension over libgymmetrics' C ABI
 * (gym_metrics.h). Errors become ValueError (bad argument) or RuntimeError
 * (an event that does not fit the state), with the library's message. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "gym_metrics.h"

static const char* kCapsule = "gym_metrics.limit";

static PyObject* raise_error(int rc) {
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
  if (rc != GYM_OK) return raise_error(rc);
  return PyCapsule_New(l, kCapsule, close_limit);
}

/* Events take the handle alone (METH_O: no argument tuple to parse, as
 * they are on every acquire and release). */
#define LIMIT_EVENT(name, call)                                         \
  static PyObject* name(PyObject* self, PyObject* capsule) {            \
    (void)self;                                                         \
    gym_limit* l = (gym_limit*)PyCapsule_GetPointer(capsule, kCapsule); \
    if (l == NULL) return NULL;                                         \
    int rc = call(l);                                                   \
    if (rc != GYM_OK) return raise_error(rc);                           \
    Py_RETURN_NONE;                                                     \
  }

LIMIT_EVENT(limit_acquired, gym_limit_acquired)
LIMIT_EVENT(limit_wait_started, gym_limit_wait_started)
LIMIT_EVENT(limit_wait_admitted, gym_limit_wait_admitted)
LIMIT_EVENT(limit_wait_timed_out, gym_limit_wait_timed_out)
LIMIT_EVENT(limit_wait_cancelled, gym_limit_wait_cancelled)
LIMIT_EVENT(limit_released, gym_limit_released)

static PyObject* operation_queued(PyObject* self, PyObject* args) {
  const char *op, *ex;
  (void)self;
  if (!PyArg_ParseTuple(args, "ss", &op, &ex)) return NULL;
  int rc = gym_operation_queued(op, ex);
  if (rc != GYM_OK) return raise_error(rc);
  Py_RETURN_NONE;
}

static PyObject* operation_dequeued(PyObject* self, PyObject* args) {
  const char *op, *ex;
  (void)self;
  if (!PyArg_ParseTuple(args, "ss", &op, &ex)) return NULL;
  int rc = gym_operation_dequeued(op, ex);
  if (rc != GYM_OK) return raise_error(rc);
  Py_RETURN_NONE;
}

static PyObject* operation_started(PyObject* self, PyObject* args) {
  const char *op, *ex;
  double queue_seconds;
  (void)self;
  if (!PyArg_ParseTuple(args, "ssd", &op, &ex, &queue_seconds)) return NULL;
  int rc = gym_operation_started(op, ex, queue_seconds);
  if (rc != GYM_OK) return raise_error(rc);
  Py_RETURN_NONE;
}

static PyObject* operation_finished(PyObject* self, PyObject* args) {
  const char *op, *ex, *outcome;
  double seconds;
  (void)self;
  if (!PyArg_ParseTuple(args, "ssds", &op, &ex, &seconds, &outcome)) return NULL;
  int rc = gym_operation_finished(op, ex, seconds, outcome);
  if (rc != GYM_OK) return raise_error(rc);
  Py_RETURN_NONE;
}

static PyObject* declare_server(PyObject* self, PyObject* args) {
  const char *name, *type;
  (void)self;
  if (!PyArg_ParseTuple(args, "ss", &name, &type)) return NULL;
  int rc = gym_declare_server(name, type);
  if (rc != GYM_OK) return raise_error(rc);
  Py_RETURN_NONE;
}

static PyMethodDef kMethods[] = {
    {"limit_open", limit_open, METH_VARARGS, "Open a concurrency limit; returns its handle."},
    {"limit_acquired", limit_acquired, METH_O, "A slot was taken without waiting."},
    {"limit_wait_started", limit_wait_started, METH_O, "A caller started waiting."},
    {"limit_wait_admitted", limit_wait_admitted, METH_O, "A waiting caller got a slot."},
    {"limit_wait_timed_out", limit_wait_timed_out, METH_O, "A wait ran out of time."},
    {"limit_wait_cancelled", limit_wait_cancelled, METH_O, "A wait was cancelled."},
    {"limit_released", limit_released, METH_O, "A slot was returned."},
    {"operation_queued", operation_queued, METH_VARARGS, "An operation waits for its limit."},
    {"operation_dequeued", operation_dequeued, METH_VARARGS, "A waiting operation gave up."},
    {"operation_started", operation_started, METH_VARARGS, "An operation entered its limit."},
    {"operation_finished", operation_finished, METH_VARARGS, "An operation left its limit."},
    {"declare_server", declare_server, METH_VARARGS, "Declare this process's server identity."},
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

PyMODINIT_FUNC PyInit__gym_metrics(void) {
  return PyModule_Create(&kModule);
}
