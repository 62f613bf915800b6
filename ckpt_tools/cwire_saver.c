/* ckpt_tools.cwire.save_sources: which variable a TF1 Saver's save op saved under each key, read
 * from a .meta's (or TF1 SavedModel's) graph_def (see cwire.c).
 *
 * The compiled form of formats/meta_saver.py's walk (graph_def.py's parts in cwire_graph.c):
 * graph_def._graph (the node index, each node's name read from its first field),
 * meta_saver._sources (the save ops under the SaverDef's scope, their tensor_names Const, their
 * inputs) and graph_def.through_reads / LazyNodes.head (reads followed back to the variable). It
 * decodes what the Python path decodes, in the same order, and hands the whole file back (None)
 * wherever that path would read anything else: a malformed field anywhere it walks (Python raises,
 * or reads the file as text), a node whose name is not its first field or runs past it, two nodes
 * of one name, a name, input or save tensor that is not ASCII (Python compares decoded text; ASCII
 * bytes compare the same), a field length past its node (Python's _field slices it short). Every
 * read is bounds-checked against its message; memory is bounded by the input's size (a node takes
 * at least 4 bytes) and hash probes by PROBE_CAP. */

#include "cwire_graph.h"

/* Appends source to out[key] (setdefault). 0 or -1 (exception set). */
static int add_source(PyObject *out, span_t key, span_t source)
{
    PyObject *k = PyUnicode_DecodeUTF8((const char *)key.p, key.n, "replace");
    PyObject *s = k == NULL ? NULL : PyUnicode_DecodeASCII((const char *)source.p, source.n,
                                                            "strict");
    PyObject *empty = s == NULL ? NULL : PyList_New(0);
    PyObject *list = empty == NULL ? NULL : PyDict_SetDefault(out, k, empty);
    int rc = list == NULL ? -1 : PyList_Append(list, s);
    Py_XDECREF(k);
    Py_XDECREF(s);
    Py_XDECREF(empty);
    return rc;
}

/* meta_saver._sources over an indexed graph: fills out (empty: none recorded). OK, PY, ERR. */
static int sources(const graph_t *g, span_t save_tensor, PyObject *out)
{
    static const struct { const char *op; Py_ssize_t first; } SAVE_OPS[] = {
        {"SaveV2", 3}, {"SaveSlices", 3}, {"Save", 2}};
    span_t scope = save_tensor;
    while (scope.n > 0 && scope.p[0] == '^') {
        scope.p++;
        scope.n--;
    }
    scope = op_name(scope);
    while (scope.n > 0 && scope.p[scope.n - 1] != '/')
        scope.n--; /* rpartition("/")[0], with its "/" */
    if (scope.n <= 1)
        return OK;
    decoded_t node = {{0}}, keys = {{0}}, read = {{0}};
    const gnode_t *keys_node = NULL; /* the names Const decoded into keys */
    int r = OK;
    for (Py_ssize_t i = 0; i < g->n && r == OK; i++) {
        const gnode_t *nd = &g->nodes[i];
        if (nd->name_len < scope.n || memcmp(nd->name, scope.p, (size_t)scope.n) != 0)
            continue;
        int found;
        span_t op, first_input, name = {nd->name, nd->name_len};
        Py_ssize_t first = -1;
        if ((r = cwg_head(g, name, &found, &op, &first_input, &read)) != OK)
            break;
        for (int k = 0; k < 3; k++)
            if (equals(op, SAVE_OPS[k].op))
                first = SAVE_OPS[k].first;
        if (first < 0)
            continue;
        if ((r = cwg_decode_node(nd, &node)) != OK)
            break;
        if (node.n_inputs <= first)
            continue;
        const gnode_t *names;
        if ((r = cwg_lookup(g, node.inputs[1], &names)) != OK)
            break;
        /* Save ops share their names Const: it is decoded (and its strings checked, which
         * walks all of them) once for a run of them, not once each (r24 F3). */
        if (names == NULL)
            keys.tensor = (span_t){NULL, -1};
        else if (names != keys_node && (r = cwg_decode_node(names, &keys)) != OK)
            break;
        keys_node = names;
        Py_ssize_t n_keys = 0, at = 0;
        uint64_t number;
        int wire;
        span_t s;
        /* Counting stops one past the save op's inputs: many save ops sharing one names Const
         * of many strings would otherwise cost their product (review-13-attack-r24 F3). */
        while (n_keys <= node.n_inputs - first && keys.tensor.n >= 0 &&
               next_field(keys.tensor.p, &at, keys.tensor.n, &number, &wire, &s) == 1)
            n_keys += number == 8 && wire == 2; /* TensorProto.string_val */
        if (n_keys != node.n_inputs - first)
            continue; /* not the layout a Saver builds: say nothing */
        at = 0;
        for (Py_ssize_t j = first; j < node.n_inputs && r == OK;) {
            if (next_field(keys.tensor.p, &at, keys.tensor.n, &number, &wire, &s) != 1)
                break; /* not reached: the fields were counted above */
            if (number != 8 || wire != 2)
                continue;
            span_t source = node.inputs[j++];
            if ((r = cwg_through_reads(g, &source, &read)) == OK && add_source(out, s, source) < 0)
                r = ERR;
        }
    }
    PyMem_Free(node.inputs);
    PyMem_Free(keys.inputs);
    PyMem_Free(read.inputs);
    return r;
}

/* graph_def._graph + meta_saver._sources of one MetaGraphDef: appends its sources to result
 * where it records any. OK, PY or ERR. */
static int meta_graph(const unsigned char *b, Py_ssize_t end, PyObject *result)
{
    Py_ssize_t pos = 0;
    uint64_t number;
    int wire, r;
    span_t v, graph = {NULL, -1}, saver = {NULL, -1}, save_tensor = {b, 0};
    while ((r = next_field(b, &pos, end, &number, &wire, &v)) == 1) {
        if (number == 2 && wire == 2)
            graph = v;
        else if (number == 3 && wire == 2)
            saver = v;
    }
    if (r < 0)
        return PY;
    if (graph.n < 0)
        return OK;
    graph_t g = {0};
    if ((r = cwg_index_graph(graph.p, graph.n, &g)) == OK && saver.n >= 0) {
        pos = 0;
        while ((r = next_field(saver.p, &pos, saver.n, &number, &wire, &v)) == 1) {
            if (number == 2 && wire == 2) { /* SaverDef.save_tensor_name: the first one */
                save_tensor = v;
                break;
            }
        }
        r = r < 0 || !ascii(save_tensor) ? PY : OK;
    }
    PyObject *out = r == OK ? PyDict_New() : NULL;
    if (r == OK && out == NULL)
        r = ERR;
    if (r == OK)
        r = sources(&g, save_tensor, out);
    if (r == OK && PyDict_GET_SIZE(out) > 0 && PyList_Append(result, out) < 0)
        r = ERR;
    Py_XDECREF(out);
    PyMem_Free(g.nodes);
    PyMem_Free(g.slots);
    return r;
}

const char cw_save_sources_doc[] =
    "save_sources(data, saved_model) -> list[dict[str, list[str]]] | None\n\n"
    "meta_saver.saved_sources_each over the bytes of a binary .meta (or, saved_model true, a\n"
    "SavedModel's saved_model.pb): for each meta graph whose save op records any key, key ->\n"
    "the variables saved under it. None: the Python path reads this file (anything outside the\n"
    "layout TensorFlow writes, text format included).";

PyObject *cw_save_sources(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    int saved_model;
    if (!PyArg_ParseTuple(args, "y*p", &buf, &saved_model))
        return NULL;
    const unsigned char *b = buf.buf;
    Py_ssize_t end = buf.len, pos = 0;
    PyObject *result = PyList_New(0);
    int r = result == NULL ? ERR : OK;
    if (r == OK && saved_model) {
        uint64_t number;
        int wire, f = 0;
        span_t v;
        while (r == OK && (f = next_field(b, &pos, end, &number, &wire, &v)) == 1)
            if (number == 2 && wire == 2) /* SavedModel.meta_graphs */
                r = meta_graph(v.p, v.n, result);
        if (r == OK && f < 0)
            r = PY;
    } else if (r == OK) {
        r = meta_graph(b, end, result);
    }
    PyBuffer_Release(&buf);
    if (r != OK)
        Py_CLEAR(result);
    if (r == PY)
        Py_RETURN_NONE;
    return result;
}
