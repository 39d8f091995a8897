/* The tracer's per-batch hooks in C: begin_batch and end_batch of a batch
 * on the fast path (trace/fastpath.py is the same in Python, and says what
 * the fast path is).
 *
 * Why C: an eager GPU step is host-bound, and between two batches the
 * step's own Python and CuPy work has evicted the tracer's code and data
 * from the caches, so the Python hooks cost several times inside the step
 * what they cost run back to back (benchmarks/trace_cost.py); these
 * functions touch a few cache lines and run no bytecode. The record is the one struct.pack_into writes (records.py:
 * BatchLayout), field by field in order, its size last.
 *
 * Linux on little-endian machines only: time.perf_counter() there is
 * CLOCK_MONOTONIC in nanoseconds divided by 1e9, which this reproduces, and
 * the record is little-endian. Elsewhere the module is not built and the
 * Python fast path runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#if !defined(__linux__) || !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "perfmlp.trace._fastpath is built for little-endian Linux only (the Python fast path runs elsewhere)"
#endif

#define HEAD_BYTES 48   /* BatchLayout.HEAD_BYTES: the record less its phase starts */
#define NBYTES 5        /* Counts' byte counters, in this order: */
static const char *BYTE_NAMES[NBYTES] = {"bytes_h2d", "bytes_d2h", "bytes_d2d", "bytes_mpi", "bytes_nccl"};
static PyObject *byte_names[NBYTES], *collectives_name;

typedef struct {
    PyObject_HEAD
    PyObject *mm;                 /* the mapped batch file (a writable buffer) */
    Py_ssize_t pos, limit;        /* the next record's offset; stores below limit take no page fault */
    long long samples, local;     /* the fast path's piece size (-1: none, every batch takes the general path) */
    Py_ssize_t nfast;             /* the phase stamps a fast batch takes */
    unsigned int shape_id, size;  /* the batch's Shape and its record's size */
    long long bytes[NBYTES];      /* the Shape's byte counts */
    PyObject *coll;               /* the Shape's collectives (a list) */
    long long epoch, batch;
    double t0, t1;
    PyObject *stamps;             /* the phase stamps (floats), appended by the phase hooks */
    PyObject *begin_other, *end_other, *grow;   /* the tracer's general path and its file's growth */
} FastPath;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)((int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec) / 1e9;
}

static int fp_traverse(FastPath *self, visitproc visit, void *arg)
{
    Py_VISIT(self->mm);
    Py_VISIT(self->coll);
    Py_VISIT(self->stamps);
    Py_VISIT(self->begin_other);
    Py_VISIT(self->end_other);
    Py_VISIT(self->grow);
    return 0;
}

static int fp_clear(FastPath *self)
{
    Py_CLEAR(self->mm);
    Py_CLEAR(self->coll);
    Py_CLEAR(self->stamps);
    Py_CLEAR(self->begin_other);
    Py_CLEAR(self->end_other);
    Py_CLEAR(self->grow);
    return 0;
}

static void fp_dealloc(FastPath *self)
{
    PyObject_GC_UnTrack(self);
    fp_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* FastPath(stamps, mm, pos, limit, begin_other, end_other, grow) */
static int fp_init(FastPath *self, PyObject *args, PyObject *kwds)
{
    PyObject *stamps, *mm, *begin_other, *end_other, *grow;
    Py_ssize_t pos, limit;
    if (!PyArg_ParseTuple(args, "O!OnnOOO", &PyList_Type, &stamps, &mm, &pos, &limit, &begin_other, &end_other,
                          &grow))
        return -1;
    Py_INCREF(stamps); Py_XSETREF(self->stamps, stamps);
    Py_INCREF(mm); Py_XSETREF(self->mm, mm);
    Py_INCREF(begin_other); Py_XSETREF(self->begin_other, begin_other);
    Py_INCREF(end_other); Py_XSETREF(self->end_other, end_other);
    Py_INCREF(grow); Py_XSETREF(self->grow, grow);
    Py_INCREF(Py_None); Py_XSETREF(self->coll, Py_None);
    self->pos = pos;
    self->limit = limit;
    self->samples = self->local = -1;
    self->nfast = -1;
    self->size = self->shape_id = 0;
    self->t0 = self->t1 = 0.0;
    return 0;
}

/* begin_batch(epoch, batch, samples, local) */
static PyObject *fp_begin(FastPath *self, PyObject *const *args, Py_ssize_t n)
{
    long long v[4];
    if (n != 4) {
        PyErr_SetString(PyExc_TypeError, "begin_batch takes epoch, batch, samples, local");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        v[i] = PyLong_AsLongLong(args[i]);
        if (v[i] == -1 && PyErr_Occurred())
            return NULL;
    }
    if (v[2] != self->samples || v[3] != self->local)   /* another piece size, or the general path */
        return PyObject_Vectorcall(self->begin_other, args, 4, NULL);
    self->epoch = v[0];
    self->batch = v[1];
    if (PyList_SetSlice(self->stamps, 0, PY_SSIZE_T_MAX, NULL) < 0)
        return NULL;
    self->t0 = now();
    Py_RETURN_NONE;
}

/* 1: counts holds the Shape's bytes and collectives, 0: it does not, -1: an error */
static int same_counts(FastPath *self, PyObject *counts)
{
    for (int i = 0; i < NBYTES; i++) {
        PyObject *o = PyObject_GetAttr(counts, byte_names[i]);
        if (o == NULL)
            return -1;
        long long b = PyLong_AsLongLong(o);
        Py_DECREF(o);
        if (b == -1 && PyErr_Occurred())
            return -1;
        if (b != self->bytes[i])
            return 0;
    }
    PyObject *c = PyObject_GetAttr(counts, collectives_name);
    if (c == NULL)
        return -1;
    int same = PyObject_RichCompareBool(c, self->coll, Py_EQ);
    Py_DECREF(c);
    return same;
}

static int store(FastPath *self, double loss)
{
    Py_ssize_t nst = PyList_GET_SIZE(self->stamps), end = self->pos + self->size;
    if (end > self->limit) {
        PyObject *need = PyLong_FromSsize_t(end);
        if (need == NULL)
            return -1;
        PyObject *r = PyObject_CallOneArg(self->grow, need);   /* a full disk raises here, the record not counted */
        Py_DECREF(need);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    if (self->epoch < INT32_MIN || self->epoch > INT32_MAX || self->batch < INT32_MIN || self->batch > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "epoch or batch out of the record's 32-bit range");
        return -1;
    }
    Py_buffer view;
    if (self->mm == NULL || self->mm == Py_None) {
        PyErr_SetString(PyExc_ValueError, "the batch file is not mapped");
        return -1;
    }
    if (PyObject_GetBuffer(self->mm, &view, PyBUF_WRITABLE) < 0)
        return -1;
    if (view.len < end || (Py_ssize_t)self->size != HEAD_BYTES + 8 * nst) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "the batch record does not fit its file or its shape");
        return -1;
    }
    char *p = (char *)view.buf + self->pos;
    uint32_t u = self->shape_id;
    int32_t e = (int32_t)self->epoch, b = (int32_t)self->batch;
    double head[4] = {loss, self->t0, self->t1, -1.0};   /* loss, start, end, no GPU total */
    memcpy(p, &u, 4);
    memcpy(p + 4, &e, 4);
    memcpy(p + 8, &b, 4);
    memcpy(p + 12, head, sizeof head);
    p += 12 + sizeof head;
    for (Py_ssize_t i = 0; i < nst; i++, p += 8) {
        double t = PyFloat_AsDouble(PyList_GET_ITEM(self->stamps, i));
        if (t == -1.0 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return -1;
        }
        memcpy(p, &t, 8);
    }
    __asm__ __volatile__("" ::: "memory");   /* the size last: a record without it was cut off as it was written */
    u = self->size;
    memcpy(p, &u, 4);
    PyBuffer_Release(&view);
    self->pos = end;
    return 0;
}

/* end_batch(loss, counts) */
static PyObject *fp_end(FastPath *self, PyObject *const *args, Py_ssize_t n)
{
    double t1 = now();
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "end_batch takes loss, counts");
        return NULL;
    }
    self->t1 = t1;
    int same = 0;
    if (self->nfast >= 0 && PyList_GET_SIZE(self->stamps) == self->nfast) {
        same = same_counts(self, args[1]);
        if (same < 0)
            return NULL;
    }
    if (!same)
        return PyObject_Vectorcall(self->end_other, args, 2, NULL);
    double loss = NAN;
    if (args[0] != Py_None) {
        loss = PyFloat_AsDouble(args[0]);
        if (loss == -1.0 && PyErr_Occurred())
            return NULL;
    }
    if (store(self, loss) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* set_shape(id, size, bytes, collectives): the Shape the fast path's batches reference */
static PyObject *fp_set_shape(FastPath *self, PyObject *args)
{
    unsigned int id, size;
    PyObject *bytes, *coll;
    if (!PyArg_ParseTuple(args, "IIOO", &id, &size, &bytes, &coll))
        return NULL;
    PyObject *seq = PySequence_Fast(bytes, "bytes: a sequence of five counts");
    if (seq == NULL)
        return NULL;
    if (PySequence_Fast_GET_SIZE(seq) != NBYTES) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "bytes: a sequence of five counts");
        return NULL;
    }
    long long b[NBYTES];
    for (int i = 0; i < NBYTES; i++) {
        b[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (b[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    memcpy(self->bytes, b, sizeof b);
    self->shape_id = id;
    self->size = size;
    Py_INCREF(coll);
    Py_XSETREF(self->coll, coll);
    Py_RETURN_NONE;
}

static PyMethodDef fp_methods[] = {
    {"begin_batch", (PyCFunction)(void (*)(void))fp_begin, METH_FASTCALL,
     "begin_batch(epoch, batch, samples, local)"},
    {"end_batch", (PyCFunction)(void (*)(void))fp_end, METH_FASTCALL, "end_batch(loss, counts)"},
    {"set_shape", (PyCFunction)fp_set_shape, METH_VARARGS, "set_shape(id, size, bytes, collectives)"},
    {NULL}
};

static PyMemberDef fp_members[] = {
    {"mm", T_OBJECT, offsetof(FastPath, mm), 0, "the mapped batch file (None: none)"},
    {"pos", T_PYSSIZET, offsetof(FastPath, pos), 0, "the next record's offset"},
    {"limit", T_PYSSIZET, offsetof(FastPath, limit), 0, "stores below it take no page fault"},
    {"samples", T_LONGLONG, offsetof(FastPath, samples), 0, "the fast path's batch size (-1: none)"},
    {"local", T_LONGLONG, offsetof(FastPath, local), 0, "the fast path's piece size (-1: none)"},
    {"nfast", T_PYSSIZET, offsetof(FastPath, nfast), 0, "the phase stamps a fast batch takes"},
    {"epoch", T_LONGLONG, offsetof(FastPath, epoch), 0, "the batch's epoch"},
    {"batch", T_LONGLONG, offsetof(FastPath, batch), 0, "the batch"},
    {"t0", T_DOUBLE, offsetof(FastPath, t0), 0, "the batch's start (perf_counter seconds)"},
    {"t1", T_DOUBLE, offsetof(FastPath, t1), 0, "the batch's end"},
    {"stamps", T_OBJECT_EX, offsetof(FastPath, stamps), READONLY, "the phase stamps"},
    {NULL}
};

static PyTypeObject FastPathType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfmlp.trace._fastpath.FastPath",
    .tp_doc = "The tracer's begin_batch and end_batch on the fast path, in C (trace/fastpath.py).",
    .tp_basicsize = sizeof(FastPath),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)fp_init,
    .tp_dealloc = (destructor)fp_dealloc,
    .tp_traverse = (traverseproc)fp_traverse,
    .tp_clear = (inquiry)fp_clear,
    .tp_methods = fp_methods,
    .tp_members = fp_members,
};

/* Stamper(stamps): called with no arguments, appends perf_counter() to the
 * list `stamps`. A phase's __enter__ on the host clock (trace/fastpath.py:
 * stamp_class): the with statement takes it from the class as it is (no
 * descriptor, so no bound method is made) and calls it; one C call in
 * place of map/starmap's three. */
typedef struct {
    PyObject_HEAD
    PyObject *stamps;
} Stamper;

static int st_traverse(Stamper *self, visitproc visit, void *arg)
{
    Py_VISIT(self->stamps);
    return 0;
}

static int st_clear(Stamper *self)
{
    Py_CLEAR(self->stamps);
    return 0;
}

static void st_dealloc(Stamper *self)
{
    PyObject_GC_UnTrack(self);
    st_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int st_init(Stamper *self, PyObject *args, PyObject *kwds)
{
    PyObject *stamps;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &stamps))
        return -1;
    Py_INCREF(stamps);
    Py_XSETREF(self->stamps, stamps);
    return 0;
}

static PyObject *st_call(Stamper *self, PyObject *args, PyObject *kwds)
{
    PyObject *t = PyFloat_FromDouble(now());
    if (t == NULL)
        return NULL;
    int r = PyList_Append(self->stamps, t);
    Py_DECREF(t);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyTypeObject StamperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfmlp.trace._fastpath.Stamper",
    .tp_doc = "Stamper(stamps)(): appends perf_counter() to stamps.",
    .tp_basicsize = sizeof(Stamper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)st_init,
    .tp_dealloc = (destructor)st_dealloc,
    .tp_traverse = (traverseproc)st_traverse,
    .tp_clear = (inquiry)st_clear,
    .tp_call = (ternaryfunc)st_call,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpath",
                                    "The tracer's per-batch hooks in C (perfmlp/trace/fastpath.py).", -1};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    for (int i = 0; i < NBYTES; i++)
        if ((byte_names[i] = PyUnicode_InternFromString(BYTE_NAMES[i])) == NULL)
            return NULL;
    if ((collectives_name = PyUnicode_InternFromString("collectives")) == NULL)
        return NULL;
    if (PyType_Ready(&FastPathType) < 0 || PyType_Ready(&StamperType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastPathType);
    if (PyModule_AddObject(m, "FastPath", (PyObject *)&FastPathType) < 0) {
        Py_DECREF(&FastPathType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&StamperType);
    if (PyModule_AddObject(m, "Stamper", (PyObject *)&StamperType) < 0) {
        Py_DECREF(&StamperType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
