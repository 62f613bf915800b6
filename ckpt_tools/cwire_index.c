/* ckpt_tools.cwire.bundle_block: one .index data block's entries (see cwire.c). */
#include "cwire.h"

#define MAX_RANK 64 /* TensorFlow's TensorShape::MaxDimensions() */

/* table.Cursor.varint(32): at most 5 bytes (the 5th may not continue). 0, or -1 where the
 * Python path raises. */
static int varint32(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out)
{
    uint64_t r = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end)
            return -1;
        unsigned char c = b[p++];
        r |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            break;
        shift += 7;
        if (shift >= 32)
            return -1;
    }
    *pos = p;
    *out = r;
    return 0;
}
typedef struct {
    int dtype, rank, shard, has_crc;
    uint64_t dims[MAX_RANK];
    uint64_t offset, size;
    uint32_t crc;
} entry_t;

/* The layout TensorFlow writes, fields in number order, each at most once: a one-byte dtype,
 * dims without names (each `0x12 len 0x08 size`, size a varint of exactly len - 1 bytes, below
 * 2**63), a one-byte shard, offset and size below 2**63, an optional crc32c, nothing else.
 * bundle_wire._decode_canonical takes dims below 128 only; larger ones (most real shapes) give
 * the values bundle_wire._decode_general gives. 0, or -1 for anything else (the Python path
 * decides it). */
static int canonical(const unsigned char *b, Py_ssize_t n, entry_t *e)
{
    if (n < 4 || b[0] != 8 || b[2] != 18)
        return -1;
    unsigned dtype = b[1], slen = b[3];
    if ((dtype | slen) >= 0x80)
        return -1;
    Py_ssize_t pos = 4 + (Py_ssize_t)slen;
    if (pos > n)
        return -1;
    int k = 0;
    for (Py_ssize_t d = 4; d < pos; k++) { /* dim {1: size}: 0x12 len 0x08 size */
        if (k >= MAX_RANK || pos - d < 4 || b[d] != 0x12 || b[d + 2] != 8)
            return -1;
        Py_ssize_t len = b[d + 1], vend = d + 2 + len;
        if (len < 2 || len > 10 || vend > pos)
            return -1;
        Py_ssize_t v = d + 3;
        if (cw_varint64(b, &v, vend, &e->dims[k]) < 0 || v != vend || e->dims[k] >> 63)
            return -1;
        d = vend;
    }
    e->dtype = (int)dtype;
    e->rank = k;
    e->shard = 0;
    e->offset = e->size = 0;
    e->has_crc = 0;
    e->crc = 0;
    if (pos < n && b[pos] == 24) { /* 3: shard_id */
        if (pos + 1 >= n || b[pos + 1] >= 0x80)
            return -1;
        e->shard = b[pos + 1];
        pos += 2;
    }
    if (pos < n && b[pos] == 32) { /* 4: offset */
        pos += 1;
        if (cw_varint64(b, &pos, n, &e->offset) < 0 || e->offset >> 63)
            return -1;
    }
    if (pos < n && b[pos] == 40) { /* 5: size */
        pos += 1;
        if (cw_varint64(b, &pos, n, &e->size) < 0 || e->size >> 63)
            return -1;
    }
    if (pos + 5 == n && b[pos] == 53) { /* 6: crc32c, fixed32 */
        e->crc = (uint32_t)b[pos + 1] | (uint32_t)b[pos + 2] << 8 | (uint32_t)b[pos + 3] << 16 |
                 (uint32_t)b[pos + 4] << 24;
        e->has_crc = 1;
        pos = n;
    }
    return pos == n ? 0 : -1;
}

/* A TensorEntry as entry.bundle_entry builds it: object.__new__(cls), then its __dict__. */
static PyObject *make_entry(PyTypeObject *cls, PyObject *empty, PyObject *name, const entry_t *e)
{
    PyObject *obj = PyBaseObject_Type.tp_new(cls, empty, NULL);
    if (obj == NULL)
        return NULL;
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    if (d == NULL) {
        Py_DECREF(obj);
        return NULL;
    }
    PyObject *shape = PyTuple_New(e->rank);
    PyObject *vals[8] = {NULL};
    int ok = shape != NULL;
    for (int i = 0; ok && i < e->rank; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(e->dims[i]);
        if (v == NULL)
            ok = 0;
        else
            PyTuple_SET_ITEM(shape, i, v);
    }
    if (ok) {
        vals[0] = PyLong_FromLong(e->dtype);
        vals[1] = PyLong_FromLong(e->shard);
        vals[2] = PyLong_FromUnsignedLongLong(e->offset);
        vals[3] = PyLong_FromUnsignedLongLong(e->size);
        vals[4] = e->has_crc ? PyLong_FromUnsignedLong(e->crc) : Py_NewRef(Py_None);
        vals[5] = PyDict_New();
        ok = vals[0] && vals[1] && vals[2] && vals[3] && vals[4] && vals[5];
    }
    ok = ok && PyDict_SetItem(d, cw_name, name) == 0 && PyDict_SetItem(d, cw_dtype, vals[0]) == 0 &&
         PyDict_SetItem(d, cw_shape, shape) == 0 && PyDict_SetItem(d, cw_shard_id, vals[1]) == 0 &&
         PyDict_SetItem(d, cw_offset, vals[2]) == 0 &&
         PyDict_SetItem(d, cw_stored_bytes, vals[3]) == 0 &&
         PyDict_SetItem(d, cw_crc32c, vals[4]) == 0 && PyDict_SetItem(d, cw_slices, empty) == 0 &&
         PyDict_SetItem(d, cw_extra, vals[5]) == 0;
    Py_XDECREF(shape);
    for (int i = 0; i < 6; i++)
        Py_XDECREF(vals[i]);
    Py_DECREF(d);
    if (!ok) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj;
}

/* Growable key buffer (a key is its predecessor's first `shared` bytes plus new ones). */
typedef struct {
    unsigned char *p;
    Py_ssize_t len, cap;
} keybuf;

static int key_set(keybuf *k, Py_ssize_t shared, const unsigned char *more, Py_ssize_t n)
{
    Py_ssize_t need = shared + n;
    if (need > k->cap) {
        Py_ssize_t cap = need * 2;
        unsigned char *p = PyMem_Realloc(k->p, (size_t)cap);
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        k->p = p;
        k->cap = cap;
    }
    memcpy(k->p + shared, more, (size_t)n);
    k->len = need;
    return 0;
}

/* bytes comparison as Python's: 1 when a > b. */
static int key_after(const unsigned char *a, Py_ssize_t na, const unsigned char *b, Py_ssize_t nb)
{
    int c = memcmp(a, b, (size_t)(na < nb ? na : nb));
    return c > 0 || (c == 0 && na > nb);
}

const char cw_bundle_block_doc[] =
             "bundle_block(block, limit, prev, budget, max_key, entry_cls, known) -> tuple | None\n\n"
             "Reads the entries of one .index data block (block[:limit], limit the start of its\n"
             "restart array; prev the key before this block, None when it starts the index) as\n"
             "formats.bundle reads them. Returns (entries, last key, key budget left, largest shard\n"
             "id or -1, header, deferred): entries maps each name to an entry_cls instance built as\n"
             "entry.bundle_entry builds it, or to None where the entry is deferred; deferred lists\n"
             "(key, value) of the entries left to the Python path (any value outside the canonical\n"
             "layout, a dtype not in known, a slice key), in order; header is the value of the\n"
             "first entry (key b'') when prev is None, else None. known: 128 bytes, known[d] != 0\n"
             "for each DataType enum d the reader accepts. Returns None when the block holds\n"
             "anything the Python path refuses or reads another way (keys out of order, a key not\n"
             "UTF-8, a malformed entry header): the caller then reads the block in Python.";

PyObject *cw_bundle_block(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t limit, max_key;
    long long budget;
    PyObject *prev, *cls;
    const char *known;
    Py_ssize_t known_len;
    if (!PyArg_ParseTuple(args, "y*nOLnOy#", &view, &limit, &prev, &budget, &max_key, &cls,
                          &known, &known_len))
        return NULL;
    PyObject *result = NULL, *entries = NULL, *header = NULL, *empty = NULL, *last = NULL,
             *deferred = NULL;
    keybuf key = {NULL, 0, 0};
    const unsigned char *pk = NULL;
    Py_ssize_t npk = 0;
    if (!PyType_Check(cls) || ((PyTypeObject *)cls)->tp_new != PyBaseObject_Type.tp_new ||
        known_len != 128 || limit < 0 || limit > view.len ||
        (prev != Py_None && !PyBytes_Check(prev))) {
        PyErr_SetString(PyExc_TypeError, "bundle_block: bad arguments");
        goto done;
    }
    if (prev != Py_None) {
        pk = (const unsigned char *)PyBytes_AS_STRING(prev);
        npk = PyBytes_GET_SIZE(prev);
    }
    entries = PyDict_New();
    deferred = PyList_New(0);
    empty = PyTuple_New(0);
    key.p = PyMem_Malloc(256);
    key.cap = 256;
    if (key.p == NULL)
        PyErr_NoMemory();
    if (entries == NULL || deferred == NULL || empty == NULL || key.p == NULL)
        goto done;
    const unsigned char *raw = view.buf;
    Py_ssize_t pos = 0;
    long max_shard = -1;
    int first = prev == Py_None;
    Py_ssize_t nread = 0; /* entries read from this block */
    while (pos < limit) {
        uint64_t shared, non_shared, value_len;
        Py_ssize_t start, end;
        /* table.Table._entries: the fast form (three one-byte varints, in bounds) costs no key
         * budget; any other is read as Cursor.varint(32) and charged to the budget. */
        if (pos + 3 <= limit && (raw[pos] | raw[pos + 1] | raw[pos + 2]) < 0x80 &&
            (Py_ssize_t)raw[pos] <= key.len &&
            pos + 3 + raw[pos + 1] + raw[pos + 2] <= limit) {
            shared = raw[pos];
            non_shared = raw[pos + 1];
            value_len = raw[pos + 2];
            start = pos + 3;
        } else {
            Py_ssize_t p = pos;
            if (varint32(raw, &p, limit, &shared) < 0 || varint32(raw, &p, limit, &non_shared) < 0 ||
                varint32(raw, &p, limit, &value_len) < 0)
                goto bail;
            if (shared > (uint64_t)key.len || shared + non_shared > (uint64_t)max_key)
                goto bail;
            budget -= (long long)(shared + non_shared);
            if (budget < 0 || non_shared > (uint64_t)(limit - p) ||
                value_len > (uint64_t)(limit - p - (Py_ssize_t)non_shared))
                goto bail;
            start = p;
        }
        /* table.Table.items: keys strictly increasing (bytes order), across blocks too. Within
         * a block the new key shares `shared` bytes with the previous one: compare the rest. */
        if (nread > 0 ? !key_after(raw + start, (Py_ssize_t)non_shared, key.p + shared,
                                   key.len - (Py_ssize_t)shared)
                      : 0)
            goto bail;
        if (key_set(&key, (Py_ssize_t)shared, raw + start, (Py_ssize_t)non_shared) < 0)
            goto done;
        if (nread == 0 && pk != NULL && !key_after(key.p, key.len, pk, npk))
            goto bail;
        nread++;
        start += (Py_ssize_t)non_shared;
        end = start + (Py_ssize_t)value_len;
        pos = end;
        if (first) { /* bundle.BundleReader._parse: the first entry is the header, key b"" */
            first = 0;
            if (key.len != 0)
                goto bail;
            header = PyBytes_FromStringAndSize((const char *)raw + start, value_len);
            if (header == NULL)
                goto done;
        } else {
            entry_t e;
            if (key.len == 0)
                goto bail; /* cannot follow the header in order: the Python path refuses it */
            int slice = key.p[0] == 0; /* "\0...": a partition's slice */
            PyObject *name = NULL, *obj = NULL;
            if (!slice) {
                name = PyUnicode_DecodeUTF8((const char *)key.p, key.len, NULL);
                if (name == NULL) { /* not UTF-8: the Python path decodes it as latin-1 */
                    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                        goto done;
                    PyErr_Clear();
                    goto bail;
                }
            }
            if (!slice && canonical(raw + start, (Py_ssize_t)value_len, &e) == 0 &&
                known[e.dtype]) {
                obj = make_entry((PyTypeObject *)cls, empty, name, &e);
                if (e.shard > max_shard)
                    max_shard = e.shard;
            } else { /* the Python path decodes (or refuses) it; its place is kept */
                PyObject *item = Py_BuildValue("(y#y#)", key.p, key.len, raw + start,
                                               (Py_ssize_t)value_len);
                int rc = item == NULL ? -1 : PyList_Append(deferred, item);
                Py_XDECREF(item);
                if (rc == 0 && !slice)
                    obj = Py_NewRef(Py_None);
                else if (rc < 0) {
                    Py_XDECREF(name);
                    goto done;
                }
            }
            int rc = obj == NULL ? (slice ? 0 : -1) : PyDict_SetItem(entries, name, obj);
            Py_XDECREF(name);
            Py_XDECREF(obj);
            if (rc < 0)
                goto done;
        }
    }
    last = nread ? PyBytes_FromStringAndSize((const char *)key.p, key.len) : Py_NewRef(prev);
    if (last == NULL)
        goto done;
    result = Py_BuildValue("(OOLlOO)", entries, last, budget, max_shard,
                           header != NULL ? header : Py_None, deferred);
    goto done;
bail:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(key.p);
    Py_XDECREF(entries);
    Py_XDECREF(deferred);
    Py_XDECREF(header);
    Py_XDECREF(empty);
    Py_XDECREF(last);
    PyBuffer_Release(&view);
    return result;
}
