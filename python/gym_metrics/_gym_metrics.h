/* What the extension's two files (_gym_metrics.c, _operation.c) share. Not
 * exported: the module's only symbol is PyInit__gym_metrics. */
#ifndef GYM_METRICS_PY_GYM_METRICS_H
#define GYM_METRICS_PY_GYM_METRICS_H

#include <Python.h>
#include <stdint.h>

#define GYMPY_INTERNAL __attribute__((visibility("hidden")))

/* The library's error `rc` as ValueError (bad argument) or RuntimeError,
 * with its message; NULL. */
GYMPY_INTERNAL PyObject* gympy_raise_error(int rc);
/* A trace context from bytes of 16 (trace id) and 8 (span id), or None and
 * None for none. 0, or -1 with TypeError. */
GYMPY_INTERNAL int gympy_trace_args(PyObject* trace, PyObject* span, const uint8_t** trace_id,
                                    const uint8_t** span_id);
/* Adds the type Operation (_operation.c) to the module. 0, or -1. */
GYMPY_INTERNAL int gympy_add_operation_type(PyObject* module);

#endif
