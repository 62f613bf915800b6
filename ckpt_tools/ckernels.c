/* Optional compiled kernels behind ckpt stats / ckpt diff (ckpt_tools.kernels).
 *
 * One pass per piece instead of NumPy's seven (min, max, zero count, widening copy, shift,
 * sum, sum of squares): each element is read once, widened to double in a register, and
 * every reduction is updated from it. Sums are float64, kept in LANES independent
 * accumulators (no reassociation: the compiler vectorizes the lanes as they are written),
 * reduced every BLOCK elements into compensated (Neumaier) totals, so the rounding stays at
 * the level of NumPy's pairwise float64 sum. NaN and Inf are not handled here: they make a
 * sum non-finite, and the caller then redoes that piece on its NumPy path, which counts them.
 *
 * Compiled with -ffp-contract=off, so every clone (AVX-512, AVX2, baseline) rounds alike.
 * Built by setup.py when a C compiler is there (Extension(optional=True)); without it
 * ckpt_tools.kernels uses NumPy alone, with the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#define LANES 16
#define BLOCK 2048 /* elements per lane reduction: 128 sequential adds per lane */

/* x86-64 Linux with GCC: one clone per ISA, chosen at load time (ifunc). Elsewhere the
 * baseline ISA the compiler targets. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

typedef struct {
    double sum, comp;
} nsum; /* Neumaier-compensated running total */

static inline void nadd(nsum *t, double v)
{
    double s = t->sum + v;
    if (fabs(t->sum) >= fabs(v))
        t->comp += (t->sum - s) + v;
    else
        t->comp += (v - s) + t->sum;
    t->sum = s;
}

typedef struct {
    double s1, s2, lo, hi;
    int64_t zeros;
} moments_t;

#define MOMENTS_KERNEL(NAME, T)                                                              \
    CLONES static void NAME(const T *x, Py_ssize_t n, double k, moments_t *out)              \
    {                                                                                        \
        nsum t1 = {0, 0}, t2 = {0, 0};                                                       \
        T lo = x[0], hi = x[0];                                                              \
        int64_t zeros = 0;                                                                   \
        Py_ssize_t i = 0;                                                                    \
        while (i < n) {                                                                      \
            Py_ssize_t end = n - i < BLOCK ? n : i + BLOCK;                                  \
            Py_ssize_t vend = i + (end - i) / LANES * LANES;                                 \
            double a1[LANES] = {0}, a2[LANES] = {0};                                         \
            T l[LANES], h[LANES];                                                            \
            int32_t z[LANES] = {0};                                                          \
            for (int j = 0; j < LANES; j++)                                                  \
                l[j] = h[j] = lo;                                                            \
            for (; i < vend; i += LANES) {                                                   \
                for (int j = 0; j < LANES; j++) {                                            \
                    T v = x[i + j];                                                          \
                    double d = (double)v - k;                                                \
                    a1[j] += d;                                                              \
                    a2[j] += d * d;                                                          \
                    l[j] = v < l[j] ? v : l[j];                                              \
                    h[j] = v > h[j] ? v : h[j];                                              \
                    z[j] += v == (T)0;                                                       \
                }                                                                            \
            }                                                                                \
            double b1 = 0, b2 = 0;                                                           \
            for (; i < end; i++) {                                                           \
                T v = x[i];                                                                  \
                double d = (double)v - k;                                                    \
                b1 += d;                                                                     \
                b2 += d * d;                                                                 \
                lo = v < lo ? v : lo;                                                        \
                hi = v > hi ? v : hi;                                                        \
                zeros += v == (T)0;                                                          \
            }                                                                                \
            for (int j = 0; j < LANES; j++) {                                                \
                b1 += a1[j];                                                                 \
                b2 += a2[j];                                                                 \
                lo = l[j] < lo ? l[j] : lo;                                                  \
                hi = h[j] > hi ? h[j] : hi;                                                  \
                zeros += z[j];                                                               \
            }                                                                                \
            nadd(&t1, b1);                                                                   \
            nadd(&t2, b2);                                                                   \
        }                                                                                    \
        out->s1 = t1.sum + t1.comp;                                                          \
        out->s2 = t2.sum + t2.comp;                                                          \
        out->lo = (double)lo;                                                                \
        out->hi = (double)hi;                                                                \
        out->zeros = zeros;                                                                  \
    }

MOMENTS_KERNEL(moments_f32, float)
MOMENTS_KERNEL(moments_f64, double)

typedef struct {
    double ref_sq, diff_sq, max_abs;
} l2_t;

#define L2_KERNEL(NAME, T)                                                                   \
    CLONES static void NAME(const T *a, const T *b, Py_ssize_t n, l2_t *out)                 \
    {                                                                                        \
        nsum tr = {0, 0}, td = {0, 0};                                                       \
        double mx = 0;                                                                       \
        Py_ssize_t i = 0;                                                                    \
        while (i < n) {                                                                      \
            Py_ssize_t end = n - i < BLOCK ? n : i + BLOCK;                                  \
            Py_ssize_t vend = i + (end - i) / LANES * LANES;                                 \
            double r[LANES] = {0}, q[LANES] = {0}, m[LANES] = {0};                           \
            for (; i < vend; i += LANES) {                                                   \
                for (int j = 0; j < LANES; j++) {                                            \
                    double va = (double)a[i + j];                                            \
                    double d = (double)b[i + j] - va;                                        \
                    double ad = fabs(d);                                                     \
                    r[j] += va * va;                                                         \
                    q[j] += d * d;                                                           \
                    m[j] = ad > m[j] ? ad : m[j];                                            \
                }                                                                            \
            }                                                                                \
            double br = 0, bq = 0;                                                           \
            for (; i < end; i++) {                                                           \
                double va = (double)a[i];                                                    \
                double d = (double)b[i] - va;                                                \
                br += va * va;                                                               \
                bq += d * d;                                                                 \
                mx = fabs(d) > mx ? fabs(d) : mx;                                            \
            }                                                                                \
            for (int j = 0; j < LANES; j++) {                                                \
                br += r[j];                                                                  \
                bq += q[j];                                                                  \
                mx = m[j] > mx ? m[j] : mx;                                                  \
            }                                                                                \
            nadd(&tr, br);                                                                   \
            nadd(&td, bq);                                                                   \
        }                                                                                    \
        out->ref_sq = tr.sum + tr.comp;                                                      \
        out->diff_sq = td.sum + td.comp;                                                     \
        out->max_abs = mx;                                                                   \
    }

L2_KERNEL(l2_f32, float)
L2_KERNEL(l2_f64, double)

/* A C-contiguous buffer of float32 (itemsize 4) or float64 (itemsize 8) values. */
static int get_floats(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '=' || *f == '<' || *f == '@')
        f++;
    if (!((view->itemsize == 4 && strcmp(f, "f") == 0) ||
          (view->itemsize == 8 && strcmp(f, "d") == 0))) {
        PyErr_SetString(PyExc_TypeError, "expected a contiguous float32 or float64 buffer");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(moments_doc,
             "moments(x) -> (k, s1, s2, min, max, zeros)\n\n"
             "One pass over a non-empty contiguous float32/float64 buffer: the shift k (its\n"
             "first value), s1 = sum(x - k), s2 = sum((x - k)**2) in float64, min, max and the\n"
             "count of zeros. s1 or s2 is not finite when x holds NaN or Inf (or s2 overflows):\n"
             "the other values are then meaningless.");

static PyObject *py_moments(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (get_floats(arg, &view) < 0)
        return NULL;
    Py_ssize_t n = view.len / view.itemsize;
    if (n == 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "empty buffer");
        return NULL;
    }
    moments_t m;
    double k;
    Py_BEGIN_ALLOW_THREADS
    if (view.itemsize == 4) {
        k = ((const float *)view.buf)[0];
        moments_f32((const float *)view.buf, n, k, &m);
    } else {
        k = ((const double *)view.buf)[0];
        moments_f64((const double *)view.buf, n, k, &m);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(dddddL)", k, m.s1, m.s2, m.lo, m.hi, (long long)m.zeros);
}

PyDoc_STRVAR(l2_doc,
             "l2(a, b) -> (sum(a**2), sum((b - a)**2), max(abs(b - a)))\n\n"
             "One pass over two contiguous buffers of one float dtype and length, in float64.\n"
             "A sum is not finite when a value is NaN or Inf (the max is then meaningless).");

static PyObject *py_l2(PyObject *self, PyObject *args)
{
    PyObject *oa, *ob;
    if (!PyArg_ParseTuple(args, "OO", &oa, &ob))
        return NULL;
    Py_buffer va, vb;
    if (get_floats(oa, &va) < 0)
        return NULL;
    if (get_floats(ob, &vb) < 0) {
        PyBuffer_Release(&va);
        return NULL;
    }
    if (va.itemsize != vb.itemsize || va.len != vb.len) {
        PyBuffer_Release(&va);
        PyBuffer_Release(&vb);
        PyErr_SetString(PyExc_ValueError, "buffers differ in dtype or length");
        return NULL;
    }
    Py_ssize_t n = va.len / va.itemsize;
    l2_t r = {0, 0, 0};
    Py_BEGIN_ALLOW_THREADS
    if (va.itemsize == 4)
        l2_f32((const float *)va.buf, (const float *)vb.buf, n, &r);
    else
        l2_f64((const double *)va.buf, (const double *)vb.buf, n, &r);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&va);
    PyBuffer_Release(&vb);
    return Py_BuildValue("(ddd)", r.ref_sq, r.diff_sq, r.max_abs);
}

static PyMethodDef methods[] = {
    {"moments", py_moments, METH_O, moments_doc},
    {"l2", py_l2, METH_VARARGS, l2_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ckernels", "Fused one-pass reductions for ckpt_tools.kernels.", -1,
    methods,
};

PyMODINIT_FUNC PyInit_ckernels(void) { return PyModule_Create(&module); }
