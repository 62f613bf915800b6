/* ckpt_tools.cwire.variable_list: a .meta variable collection's VariableDefs (see cwire.c). */
#include "cwire.h"


/* meta._variable's walk of a VariableDef, for the layout without save_slice_info_def: 0 with
 * the name's bytes and trainable, or -1 for anything else (the Python function decides it). */
static int variable_def(const unsigned char *b, Py_ssize_t end, const unsigned char **name,
                        Py_ssize_t *name_len, int *trainable)
{
    Py_ssize_t pos = 0;
    *name = b;
    *name_len = 0;
    *trainable = 0;
    while (pos < end) {
        uint64_t tag, v;
        if (cw_varint64(b, &pos, end, &tag) < 0 || tag < 8)
            return -1;
        switch (tag & 7) {
        case 2:
            if (cw_varint64(b, &pos, end, &v) < 0 || v > (uint64_t)(end - pos))
                return -1;
            if (tag == 34) /* 4: save_slice_info_def: a partition, read in Python */
                return -1;
            if (tag == 10) { /* 1: variable_name (the last one wins) */
                *name = b + pos;
                *name_len = (Py_ssize_t)v;
            }
            pos += (Py_ssize_t)v;
            break;
        case 0:
            if (cw_varint64(b, &pos, end, &v) < 0)
                return -1;
            if (tag == 56) /* 7: trainable */
                *trainable = v != 0;
            break;
        case 1:
        case 5:
            v = (tag & 7) == 1 ? 8 : 4;
            if (v > (uint64_t)(end - pos))
                return -1;
            pos += (Py_ssize_t)v;
            break;
        default:
            return -1;
        }
    }
    return 0;
}

/* The op name of a variable's tensor name (meta._variable): without ":0", else up to ":". */
static PyObject *op_name(PyObject *name)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    int tail = (int)PyUnicode_Tailmatch(name, cw_colon0, 0, n, 1);
    if (tail < 0)
        return NULL;
    if (tail)
        return PyUnicode_Substring(name, 0, n - 2);
    Py_ssize_t at = PyUnicode_FindChar(name, ':', 0, n, 1);
    if (at == -2)
        return NULL;
    return at < 0 ? Py_NewRef(name) : PyUnicode_Substring(name, 0, at);
}

static PyObject *make_meta_variable(PyTypeObject *cls, PyObject *empty, PyObject *name,
                                    int trainable)
{
    PyObject *obj = PyBaseObject_Type.tp_new(cls, empty, NULL);
    if (obj == NULL)
        return NULL;
    PyObject *d = PyObject_GenericGetDict(obj, NULL);
    int ok = d != NULL && PyDict_SetItem(d, cw_name, name) == 0 &&
             PyDict_SetItem(d, cw_checkpoint_key, name) == 0 &&
             PyDict_SetItem(d, cw_trainable, trainable ? Py_True : Py_False) == 0 &&
             PyDict_SetItem(d, cw_partition, Py_None) == 0;
    Py_XDECREF(d);
    if (!ok) {
        Py_DECREF(obj);
        return NULL;
    }
    return obj;
}

const char cw_variable_list_doc[] =
             "variable_list(values, parsed, variables, fallback, path, cls) -> list[str]\n\n"
             "meta._add_collection's loop over a variable collection's serialized VariableDefs:\n"
             "each value's MetaVariable (cls) from parsed (bytes -> MetaVariable) or decoded and\n"
             "added to it; variables.setdefault(its name, it); returns the names in order. A value\n"
             "outside the common layout (a partition, anything malformed) is decoded by\n"
             "fallback(value, path) (meta._variable), whose errors propagate.";

PyObject *cw_variable_list(PyObject *self, PyObject *args)
{
    PyObject *values, *parsed, *variables, *fallback, *path, *cls;
    if (!PyArg_ParseTuple(args, "O!O!O!OOO", &PyList_Type, &values, &PyDict_Type, &parsed,
                          &PyDict_Type, &variables, &fallback, &path, &cls))
        return NULL;
    if (!PyType_Check(cls) || ((PyTypeObject *)cls)->tp_new != PyBaseObject_Type.tp_new) {
        PyErr_SetString(PyExc_TypeError, "variable_list: cls must be a plain class");
        return NULL;
    }
    PyObject *empty = PyTuple_New(0);
    PyObject *members = PyList_New(0);
    if (empty == NULL || members == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); i++) {
        PyObject *value = Py_NewRef(PyList_GET_ITEM(values, i)); /* held: fallback runs code */
        PyObject *var = PyDict_GetItemWithError(parsed, value);
        PyObject *name;
        if (var != NULL) {
            Py_INCREF(var);
            name = PyObject_GetAttr(var, cw_name);
        } else {
            const unsigned char *nb;
            Py_ssize_t nlen;
            int trainable;
            if (PyErr_Occurred()) {
                Py_DECREF(value);
                goto fail;
            }
            if (PyBytes_Check(value) &&
                variable_def((const unsigned char *)PyBytes_AS_STRING(value),
                             PyBytes_GET_SIZE(value), &nb, &nlen, &trainable) == 0) {
                PyObject *full = PyUnicode_DecodeUTF8((const char *)nb, nlen, "replace");
                name = full == NULL ? NULL : op_name(full);
                Py_XDECREF(full);
                var = name == NULL ? NULL
                                   : make_meta_variable((PyTypeObject *)cls, empty, name, trainable);
            } else {
                var = PyObject_CallFunctionObjArgs(fallback, value, path, NULL);
                name = var == NULL ? NULL : PyObject_GetAttr(var, cw_name);
            }
            if (var != NULL && name != NULL && PyDict_SetItem(parsed, value, var) < 0)
                Py_CLEAR(var);
        }
        PyObject *kept = var == NULL || name == NULL ? NULL
                                                     : PyDict_SetDefault(variables, name, var);
        int rc = kept == NULL ? -1 : PyList_Append(members, name);
        Py_DECREF(value);
        Py_XDECREF(var);
        Py_XDECREF(name);
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(empty);
    return members;
fail:
    Py_XDECREF(empty);
    Py_XDECREF(members);
    return NULL;
}
