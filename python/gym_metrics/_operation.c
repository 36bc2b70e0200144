/* _gym_metrics.Operation: the resources-operation scope, made and entered
 * and left in C. gym_metrics.ResourcesOperation (Python) subclasses it;
 * resources_operation() (here) makes one, finding the kind by its names
 * and the trace context through gym_metrics only for names it has not seen
 * or a trace to make. `async with resources_operation(...)` then runs no
 * Python frame of ours: __aenter__ and __aexit__ return the object itself as
 * the awaitable,
 * which reports the operation and drives the limit's own __aenter__ or
 * __aexit__ (any awaitable: asyncio's semaphore is Python), passing on what
 * it yields, what is sent or thrown into it, and close.
 *
 *   enter: queued -> the limit's __aenter__ -> started (or, when it raises
 *          or is closed, dequeued), then the scope itself is the result
 *   exit:  finished with its outcome (set, else from the exception: ok,
 *          cancelled, error) -> the limit's __aexit__(None, None, None),
 *          then False (an exception is never suppressed) */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <structmember.h>
#include <time.h>

#include "_gym_metrics.h"
#include "gym_metrics.h"

enum Step { kIdle, kEnterReady, kEntering, kInside, kExitReady, kExiting };

typedef struct {
  PyObject_HEAD PyObject* limit;
  PyObject* trace; /* None, or (trace_id bytes, span_id bytes) */
  PyObject* inner; /* the limit's awaitable being driven */
  PyObject* error; /* finished's error, raised once the limit is left */
  int kind;
  int outcome; /* GYM_OUTCOME_*, -1: not set */
  int exit_outcome;
  enum Step step;
  int64_t queued, queued_at, started, running;
} Operation;

static const char* const kOutcomes[] = {"ok", "error", "timeout", "cancelled", "crashed"};

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The iterator that `await o` drives (as the interpreter finds it). */
static PyObject* awaitable_iter(PyObject* o) {
  if (PyCoro_CheckExact(o) || PyGen_CheckExact(o)) return Py_NewRef(o);
  unaryfunc get = Py_TYPE(o)->tp_as_async != NULL ? Py_TYPE(o)->tp_as_async->am_await : NULL;
  if (get == NULL) {
    PyErr_Format(PyExc_TypeError, "object %.100s can't be used in 'await' expression",
                 Py_TYPE(o)->tp_name);
    return NULL;
  }
  PyObject* it = get(o);
  if (it != NULL && !PyIter_Check(it)) {
    PyErr_Format(PyExc_TypeError, "__await__() returned non-iterator of type '%.100s'",
                 Py_TYPE(it)->tp_name);
    Py_CLEAR(it);
  }
  return it;
}

/* Names looked up on every operation, made once (gympy_add_operation_type). */
static PyObject *g_aenter, *g_aexit, *g_throw, *g_close;

/* Starts the limit's __aenter__() or (exit) __aexit__(None, None, None). */
static int open_inner(Operation* op, int exit) {
  PyObject* args[4] = {op->limit, Py_None, Py_None, Py_None};
  PyObject* aw = PyObject_VectorcallMethod(exit ? g_aexit : g_aenter, args, exit ? 4 : 1, NULL);
  if (aw == NULL) return -1;
  op->inner = awaitable_iter(aw);
  Py_DECREF(aw);
  return op->inner == NULL ? -1 : 0;
}

/* The wait ended without a slot (raised or closed): no longer queued, its
 * wait recorded as timed out (TimeoutError, as MeteredSemaphore's admission
 * timeout raises) or cancelled (anything else). The error stays set. */
static void dequeue(Operation* op) {
  const int how = PyErr_Occurred() != NULL && PyErr_ExceptionMatches(PyExc_TimeoutError)
                      ? GYM_OUTCOME_TIMEOUT
                      : GYM_OUTCOME_CANCELLED;
  const int64_t waited = now_ns() - op->queued_at;
  gym_operation_abandoned_k(op->kind, waited > 0 ? waited : 0, how, op->queued);
  op->step = kIdle;
}

/* The limit admitted the operation. */
static PySendResult entered(Operation* op, PyObject** result) {
  op->started = now_ns();
  int64_t run = 0;
  int rc = gym_operation_started_k(op->kind, op->started - op->queued_at, op->queued, &run);
  op->running = run;
  op->step = kInside;
  if (rc != GYM_OK) {
    gympy_raise_error(rc);
    return PYGEN_ERROR;
  }
  *result = Py_NewRef(op);
  return PYGEN_RETURN;
}

/* The limit was left: False, or finished's error. */
static PySendResult exited(Operation* op, PyObject** result) {
  op->step = kIdle;
  if (op->error != NULL) {
    PyErr_SetObject((PyObject*)Py_TYPE(op->error), op->error);
    Py_CLEAR(op->error);
    return PYGEN_ERROR;
  }
  *result = Py_NewRef(Py_False);
  return PYGEN_RETURN;
}

/* Where the limit's awaitable is after a step: a value it yields is passed
 * on; its end ends ours. */
static PySendResult after_inner(Operation* op, PySendResult r, PyObject** result) {
  if (r == PYGEN_NEXT) return r;
  Py_CLEAR(op->inner);
  if (r == PYGEN_RETURN) {
    Py_CLEAR(*result);
    return op->step == kEntering ? entered(op, result) : exited(op, result);
  }
  if (op->step == kEntering) dequeue(op);
  op->step = kIdle;
  Py_CLEAR(op->error); /* the limit's own error wins */
  return PYGEN_ERROR;
}

/* Reports the operation's end; an error is kept for after the limit. */
static void finish(Operation* op) {
  const uint8_t *trace_id = NULL, *span_id = NULL;
  int rc = GYM_OK;
  if (op->trace != NULL && op->trace != Py_None &&
      (!PyTuple_Check(op->trace) || PyTuple_GET_SIZE(op->trace) != 2 ||
       gympy_trace_args(PyTuple_GET_ITEM(op->trace, 0), PyTuple_GET_ITEM(op->trace, 1), &trace_id,
                        &span_id) != 0)) {
    rc = GYM_EINVAL;
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "_trace is (trace_id, span_id)");
  } else {
    rc = gym_operation_finished_kx(op->kind, now_ns() - op->started, op->exit_outcome, op->running,
                                   trace_id, span_id);
    if (rc != GYM_OK) gympy_raise_error(rc);
  }
  if (rc != GYM_OK) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL) PyException_SetTraceback(value, tb);
    op->error = value;
    Py_XDECREF(type);
    Py_XDECREF(tb);
  }
}

static PySendResult op_send(PyObject* self, PyObject* arg, PyObject** result) {
  Operation* op = (Operation*)self;
  *result = NULL;
  if (op->step == kEnterReady) {
    int64_t queued = 0;
    int rc = gym_operation_queued_k(op->kind, &queued);
    if (rc != GYM_OK) {
      op->step = kIdle;
      gympy_raise_error(rc);
      return PYGEN_ERROR;
    }
    op->queued = queued;
    op->queued_at = now_ns();
    op->step = kEntering;
    if (open_inner(op, 0) != 0) {
      dequeue(op);
      return PYGEN_ERROR;
    }
  } else if (op->step == kExitReady) {
    finish(op);
    op->step = kExiting;
    if (open_inner(op, 1) != 0) {
      op->step = kIdle;
      Py_CLEAR(op->error);
      return PYGEN_ERROR;
    }
  } else if (op->step != kEntering && op->step != kExiting) {
    PyErr_SetString(PyExc_RuntimeError, "the operation's __aenter__ or __aexit__ is not awaited");
    return PYGEN_ERROR;
  }
  return after_inner(op, PyIter_Send(op->inner, arg, result), result);
}

/* A step's result as an iterator gives it: a value yielded, or NULL with
 * StopIteration(value returned) or the error. */
static PyObject* as_iterator_step(PySendResult r, PyObject* result) {
  if (r != PYGEN_RETURN) return result;
  PyErr_SetObject(PyExc_StopIteration, result);
  Py_DECREF(result);
  return NULL;
}

static PyObject* op_iternext(PyObject* self) {
  PyObject* result = NULL;
  const PySendResult r = op_send(self, Py_None, &result);
  return as_iterator_step(r, result);
}

static PyObject* op_send_method(PyObject* self, PyObject* arg) {
  PyObject* result = NULL;
  const PySendResult r = op_send(self, arg, &result);
  return as_iterator_step(r, result);
}

/* An exception thrown in while nothing is awaited: raised as given. */
static PyObject* raise_thrown(PyObject* const* args, Py_ssize_t n) {
  PyObject* value = n > 1 && args[1] != Py_None ? args[1] : NULL;
  if (PyExceptionInstance_Check(args[0]))
    PyErr_SetObject((PyObject*)Py_TYPE(args[0]), args[0]);
  else if (PyExceptionClass_Check(args[0]))
    PyErr_SetObject(args[0], value);
  else
    PyErr_SetString(PyExc_TypeError, "exceptions must derive from BaseException");
  return NULL;
}

/* throw(type[, value[, traceback]]): into the limit's awaitable. */
static PyObject* op_throw(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  Operation* op = (Operation*)self;
  if (n < 1 || n > 3) {
    PyErr_SetString(PyExc_TypeError, "throw(type[, value[, traceback]])");
    return NULL;
  }
  if (op->inner == NULL) {
    if (op->step == kEnterReady || op->step == kExitReady) op->step = kIdle;
    return raise_thrown(args, n);
  }
  PyObject* call[4] = {op->inner, args[0], n > 1 ? args[1] : NULL, n > 2 ? args[2] : NULL};
  PyObject* value = PyObject_VectorcallMethod(g_throw, call, 1 + n, NULL);
  PyObject* result = value;
  PySendResult r = PYGEN_NEXT;
  if (value == NULL) {
    if (PyErr_ExceptionMatches(PyExc_StopIteration)) {
      PyErr_Clear();
      r = PYGEN_RETURN;
      result = Py_NewRef(Py_None);
    } else {
      r = PYGEN_ERROR;
    }
  }
  r = after_inner(op, r, &result);
  return as_iterator_step(r, result);
}

static PyObject* op_close(PyObject* self, PyObject* unused) {
  Operation* op = (Operation*)self;
  (void)unused;
  PyObject* inner = op->inner;
  op->inner = NULL;
  if (op->step == kEntering) dequeue(op);
  if (op->step != kInside) op->step = kIdle;
  Py_CLEAR(op->error);
  if (inner == NULL) Py_RETURN_NONE;
  PyObject* r = PyObject_CallMethodNoArgs(inner, g_close);
  Py_DECREF(inner);
  if (r == NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    Py_RETURN_NONE;
  }
  return r;
}

static PyObject* op_await(PyObject* self) {
  return Py_NewRef(self);
}

static PyObject* op_aenter(PyObject* self, PyObject* unused) {
  Operation* op = (Operation*)self;
  (void)unused;
  if (op->limit == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "an operation without a limit");
    return NULL;
  }
  if (op->step != kIdle && op->step != kEnterReady) {
    PyErr_SetString(PyExc_RuntimeError, "the operation is entered already");
    return NULL;
  }
  op->step = kEnterReady;
  return Py_NewRef(self);
}

/* The outcome of an exit by `exc_type`: set, ok, cancelled or error. */
static int exit_outcome(Operation* op, PyObject* exc_type) {
  if (op->outcome >= 0) return op->outcome;
  if (exc_type == Py_None) return GYM_OUTCOME_OK;
  static PyObject* cancelled = NULL;
  if (cancelled == NULL) {
    PyObject* asyncio = PyImport_ImportModule("asyncio");
    cancelled = asyncio != NULL ? PyObject_GetAttrString(asyncio, "CancelledError") : NULL;
    Py_XDECREF(asyncio);
    if (cancelled == NULL) return -1;
  }
  int is = PyType_Check(exc_type) && PyObject_IsSubclass(exc_type, cancelled) == 1;
  return is ? GYM_OUTCOME_CANCELLED : GYM_OUTCOME_ERROR;
}

static PyObject* op_aexit(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  Operation* op = (Operation*)self;
  if (n != 3) {
    PyErr_SetString(PyExc_TypeError, "__aexit__(exc_type, exc, traceback)");
    return NULL;
  }
  if (op->step != kInside) {
    PyErr_SetString(PyExc_RuntimeError, "the operation is not entered");
    return NULL;
  }
  int outcome = exit_outcome(op, args[0]);
  if (outcome < 0) return NULL;
  op->exit_outcome = outcome;
  op->step = kExitReady;
  return Py_NewRef(self);
}

static PyObject* op_get_outcome(PyObject* self, void* unused) {
  Operation* op = (Operation*)self;
  (void)unused;
  if (op->outcome < 0) Py_RETURN_NONE;
  return PyUnicode_FromString(kOutcomes[op->outcome]);
}

static int op_set_outcome(PyObject* self, PyObject* value, void* unused) {
  Operation* op = (Operation*)self;
  (void)unused;
  if (value == NULL || value == Py_None) {
    op->outcome = -1;
    return 0;
  }
  for (int i = 0; i < (int)(sizeof kOutcomes / sizeof kOutcomes[0]); ++i) {
    if (PyUnicode_Check(value) && PyUnicode_CompareWithASCIIString(value, kOutcomes[i]) == 0) {
      op->outcome = i;
      return 0;
    }
  }
  PyErr_Format(PyExc_ValueError,
               "unknown outcome %R; one of ['cancelled', 'crashed', 'error', 'ok', 'timeout']",
               value);
  return -1;
}

static int op_traverse(PyObject* self, visitproc visit, void* arg) {
  Operation* op = (Operation*)self;
  Py_VISIT(op->limit);
  Py_VISIT(op->trace);
  Py_VISIT(op->inner);
  Py_VISIT(op->error);
  return 0;
}

static int op_clear(PyObject* self) {
  Operation* op = (Operation*)self;
  Py_CLEAR(op->limit);
  Py_CLEAR(op->trace);
  Py_CLEAR(op->inner);
  Py_CLEAR(op->error);
  return 0;
}

static void op_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  op_clear(self);
  Py_TYPE(self)->tp_free(self);
}

/* What constructing a scope needs from gym_metrics, given once at its
 * import (configure_operations): its checked lookup of a kind by names,
 * its maker of a trace context, and its namespace, where _otel_trace is
 * OpenTelemetry's trace API or None (read at each construction: it may be
 * replaced). */
static PyObject *g_kind_of, *g_trace_of, *g_namespace, *g_otel_name;
static PyTypeObject* g_scope_type; /* gym_metrics.ResourcesOperation */
static PyTypeObject kOperationType;

/* Kinds by the identity of their names' str objects: a literal is the same
 * object at every call, so the common lookup is two pointer compares. */
enum { kKindCache = 32 };
static struct {
  PyObject *operation, *executor;
  int kind;
} g_kinds[kKindCache];
static int g_kind_count;

/* The kind of (operation, executor), or -1 with the exception (ValueError
 * for names it does not know, from gym_metrics' check). */
static int kind_of(PyObject* operation, PyObject* executor) {
  for (int i = 0; i < g_kind_count; ++i)
    if (g_kinds[i].operation == operation && g_kinds[i].executor == executor)
      return g_kinds[i].kind;
  PyObject* found = PyObject_CallFunctionObjArgs(g_kind_of, operation, executor, NULL);
  if (found == NULL) return -1;
  const long kind = PyLong_AsLong(found);
  Py_DECREF(found);
  if (kind == -1 && PyErr_Occurred()) return -1;
  if (kind < 0 || kind > INT_MAX) {
    PyErr_SetString(PyExc_RuntimeError, "an operation kind out of range");
    return -1;
  }
  if (g_kind_count < kKindCache && PyUnicode_CheckExact(operation) &&
      PyUnicode_CheckExact(executor)) {
    g_kinds[g_kind_count].operation = Py_NewRef(operation);
    g_kinds[g_kind_count].executor = Py_NewRef(executor);
    g_kinds[g_kind_count++].kind = (int)kind;
  }
  return (int)kind;
}

/* The trace context of a scope: None when no ids are given and
 * OpenTelemetry is not there, else gym_metrics' _trace(trace_id, span_id).
 * NULL with the exception. */
static PyObject* trace_of(PyObject* trace_id, PyObject* span_id) {
  if (trace_id == Py_None && span_id == Py_None) {
    PyObject* otel = PyDict_GetItemWithError(g_namespace, g_otel_name);
    if (otel == NULL && PyErr_Occurred()) return NULL;
    if (otel == NULL || otel == Py_None) return Py_NewRef(Py_None);
  }
  return PyObject_CallFunctionObjArgs(g_trace_of, trace_id, span_id, NULL);
}

/* Operation(limit, operation, executor, trace_id=None, span_id=None). */
static int op_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kw[] = {"limit", "operation", "executor", "trace_id", "span_id", NULL};
  PyObject *limit, *operation, *executor, *trace_id = Py_None, *span_id = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OO:ResourcesOperation", kw, &limit,
                                   &operation, &executor, &trace_id, &span_id))
    return -1;
  Operation* op = (Operation*)self;
  if (g_kind_of == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "make a scope with gym_metrics.resources_operation");
    return -1;
  }
  if (op->step != kIdle) {
    PyErr_SetString(PyExc_RuntimeError, "the operation is entered already");
    return -1;
  }
  const int kind = kind_of(operation, executor);
  if (kind < 0) return -1;
  PyObject* trace = trace_of(trace_id, span_id);
  if (trace == NULL) return -1;
  Py_XSETREF(op->limit, Py_NewRef(limit));
  Py_XSETREF(op->trace, trace);
  op->kind = kind;
  return 0;
}

/* configure_operations(kind_of, trace_of, namespace, scope_type): see
 * g_kind_of; resources_operation() makes scopes of scope_type, a subclass of
 * Operation. */
static PyObject* configure_operations(PyObject* module, PyObject* args) {
  (void)module;
  PyObject *kind, *trace, *namespace, *type;
  if (!PyArg_ParseTuple(args, "OOO!O!:configure_operations", &kind, &trace, &PyDict_Type,
                        &namespace, &PyType_Type, &type))
    return NULL;
  if (!PyCallable_Check(kind) || !PyCallable_Check(trace) ||
      !PyType_IsSubtype((PyTypeObject*)type, &kOperationType)) {
    PyErr_SetString(PyExc_TypeError,
                    "configure_operations(kind_of, trace_of, namespace, an Operation type)");
    return NULL;
  }
  Py_XSETREF(g_kind_of, Py_NewRef(kind));
  Py_XSETREF(g_trace_of, Py_NewRef(trace));
  Py_XSETREF(g_namespace, Py_NewRef(namespace));
  Py_XSETREF(g_scope_type, (PyTypeObject*)Py_NewRef(type));
  Py_RETURN_NONE;
}

/* resources_operation's arguments by position or name, into `slots`
 * (limit, operation, executor, trace_id, span_id; the ids keyword-only). */
static int scope_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                      PyObject* slots[5]) {
  static const char* const kNames[] = {"limit", "operation", "executor", "trace_id", "span_id"};
  if (nargs > 3) {
    PyErr_Format(PyExc_TypeError,
                 "resources_operation() takes 3 positional arguments but %zd "
                 "were given",
                 nargs);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) slots[i] = args[i];
  const Py_ssize_t nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int at = 0;
    while (at < 5 && PyUnicode_CompareWithASCIIString(key, kNames[at]) != 0) ++at;
    if (at == 5 || slots[at] != NULL) {
      PyErr_Format(PyExc_TypeError, "resources_operation() got %s keyword argument %R",
                   at == 5 ? "an unexpected" : "multiple values for", key);
      return -1;
    }
    slots[at] = args[nargs + k];
  }
  for (int i = 0; i < 3; ++i) {
    if (slots[i] == NULL) {
      PyErr_Format(PyExc_TypeError, "resources_operation() missing required argument '%s'",
                   kNames[i]);
      return -1;
    }
  }
  return 0;
}

static PyObject* op_new(PyTypeObject* type, PyObject* args, PyObject* kwargs);

/* resources_operation(limit, operation, executor, *, trace_id=None,
 * span_id=None): a scope of gym_metrics.ResourcesOperation, made here. */
static PyObject* resources_operation(PyObject* module, PyObject* const* args, Py_ssize_t nargs,
                                     PyObject* kwnames) {
  (void)module;
  PyObject* slots[5] = {NULL, NULL, NULL, NULL, NULL};
  if (scope_args(args, nargs, kwnames, slots) != 0) return NULL;
  if (g_scope_type == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "import gym_metrics to make a scope");
    return NULL;
  }
  const int kind = kind_of(slots[1], slots[2]);
  if (kind < 0) return NULL;
  PyObject* trace =
      trace_of(slots[3] != NULL ? slots[3] : Py_None, slots[4] != NULL ? slots[4] : Py_None);
  if (trace == NULL) return NULL;
  Operation* op = (Operation*)op_new(g_scope_type, NULL, NULL);
  if (op == NULL) {
    Py_DECREF(trace);
    return NULL;
  }
  op->limit = Py_NewRef(slots[0]);
  Py_SETREF(op->trace, trace);
  op->kind = kind;
  return (PyObject*)op;
}

static PyMethodDef kOpFunctions[] = {
    {"configure_operations", configure_operations, METH_VARARGS,
     "What making a scope needs of gym_metrics: kind_of(operation, executor), "
     "trace_of(trace_id, span_id), the namespace holding _otel_trace, the scope's type."},
    {"resources_operation", (PyCFunction)(void (*)(void))resources_operation,
     METH_FASTCALL | METH_KEYWORDS,
     "resources_operation($module, /, limit, operation, executor, *, trace_id=None, "
     "span_id=None)\n--\n\n"
     "Enter `limit` (any async context manager, such as an asyncio.Semaphore)\n"
     "and report the operation: queued while waiting, the queue duration on\n"
     "entry, active inside, the duration with its outcome on exit. An exception\n"
     "sets the outcome to error, a cancellation to cancelled, unless the block\n"
     "already set one. `operation` and `executor` are checked here (ValueError).\n"
     "\n"
     "The duration is its bucket's exemplar with trace_id and span_id (ints, as\n"
     "OpenTelemetry's SpanContext holds them, or 32 and 16 hex digits, as its\n"
     "format_trace_id and format_span_id write them; ValueError otherwise), or,\n"
     "when none are given and opentelemetry is importable, with the span current\n"
     "here, if any."},
    {NULL, NULL, 0, NULL}};

static PyObject* op_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  (void)args;
  (void)kwargs;
  Operation* op = (Operation*)type->tp_alloc(type, 0);
  if (op == NULL) return NULL;
  op->trace = Py_NewRef(Py_None);
  op->outcome = -1;
  op->step = kIdle;
  return (PyObject*)op;
}

static PyMethodDef kOpMethods[] = {
    {"__aenter__", op_aenter, METH_NOARGS, "Enter the limit (awaitable: this scope)."},
    {"__aexit__", (PyCFunction)(void (*)(void))op_aexit, METH_FASTCALL,
     "Report the end and leave the limit (awaitable: False)."},
    {"send", op_send_method, METH_O, "Send a value into the limit's awaitable."},
    {"throw", (PyCFunction)(void (*)(void))op_throw, METH_FASTCALL,
     "Throw an exception into the limit's awaitable."},
    {"close", op_close, METH_NOARGS, "Close the limit's awaitable."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef kOpMembers[] = {
    {"_limit", T_OBJECT_EX, offsetof(Operation, limit), 0, "the limit entered"},
    {"_kind", T_INT, offsetof(Operation, kind), 0, "operation_kind(operation, executor)"},
    {"_trace", T_OBJECT_EX, offsetof(Operation, trace), 0, "None or (trace_id, span_id)"},
    {NULL, 0, 0, 0, NULL}};

static PyGetSetDef kOpGetSet[] = {
    {"outcome", op_get_outcome, op_set_outcome,
     "How the work ended (ok, error, timeout, cancelled, crashed), or None: from the exit.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyAsyncMethods kOpAsync = {op_await, NULL, NULL, op_send};

static PyTypeObject kOperationType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gym_metrics._gym_metrics.Operation",
    .tp_basicsize = sizeof(Operation),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A resources operation's scope: __aenter__ and __aexit__ in C.",
    .tp_new = op_new,
    .tp_init = op_init,
    .tp_dealloc = op_dealloc,
    .tp_traverse = op_traverse,
    .tp_clear = op_clear,
    .tp_as_async = &kOpAsync,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = op_iternext,
    .tp_methods = kOpMethods,
    .tp_members = kOpMembers,
    .tp_getset = kOpGetSet,
};

int gympy_add_operation_type(PyObject* module) {
  g_aenter = PyUnicode_InternFromString("__aenter__");
  g_aexit = PyUnicode_InternFromString("__aexit__");
  g_throw = PyUnicode_InternFromString("throw");
  g_close = PyUnicode_InternFromString("close");
  g_otel_name = PyUnicode_InternFromString("_otel_trace");
  if (g_aenter == NULL || g_aexit == NULL || g_throw == NULL || g_close == NULL ||
      g_otel_name == NULL)
    return -1;
  if (PyModule_AddFunctions(module, kOpFunctions) < 0) return -1;
  if (PyType_Ready(&kOperationType) < 0) return -1;
  Py_INCREF(&kOperationType);
  if (PyModule_AddObject(module, "Operation", (PyObject*)&kOperationType) < 0) {
    Py_DECREF(&kOperationType);
    return -1;
  }
  return 0;
}
