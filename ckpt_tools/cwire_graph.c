/* graph_def.py compiled for cwire.save_sources (cwire_saver.c): a graph_def's node index by name
 * (graph_def._graph), a node decoded whole (graph_nodes.decode_node) or its op and first input
 * alone (LazyNodes.head), reads followed back (graph_def.through_reads). Every function answers
 * OK, ERR (a Python exception: memory) or PY where the Python path would read the bytes
 * otherwise. */
#include "cwire_graph.h"

/* graph_nodes._field: 1 (the field's bytes, *after the offset after it), 0 where Python answers
 * None (another tag there, a length varint over 5 bytes or cut short), -1 where the length runs
 * past the node (Python slices it short: left to Python). */
static int short_field(const unsigned char *b, Py_ssize_t n, Py_ssize_t at, unsigned char tag,
                       span_t *out, Py_ssize_t *after)
{
    if (at >= n || b[at] != tag)
        return 0;
    uint64_t size = 0;
    Py_ssize_t stop = at + 6 < n ? at + 6 : n;
    for (Py_ssize_t i = at + 1, shift = 0; i < stop; i++, shift += 7) {
        size |= (uint64_t)(b[i] & 0x7F) << shift;
        if (!(b[i] & 0x80)) {
            if (size > (uint64_t)(n - (i + 1)))
                return -1;
            out->p = b + i + 1;
            out->n = (Py_ssize_t)size;
            *after = i + 1 + (Py_ssize_t)size;
            return 1;
        }
    }
    return 0;
}

/* A hash of the name's bytes, 8 at a time; *high gets every byte ORed in (0x80: not ASCII). */
static uint64_t hash(span_t s, uint64_t *high)
{
    uint64_t h = (uint64_t)s.n * 0x9E3779B97F4A7C15ULL, w, any = 0;
    Py_ssize_t i = 0;
    for (; i + 8 <= s.n; i += 8) {
        memcpy(&w, s.p + i, 8);
        any |= w;
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    if (i < s.n) {
        w = 0;
        memcpy(&w, s.p + i, (size_t)(s.n - i));
        any |= w;
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    }
    *high = any;
    h ^= h >> 33; /* murmur3's finalizer */
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    return h;
}

/* The node named `name`: OK with *found (NULL: none), or PY (a chain past PROBE_CAP). */
int cwg_lookup(const graph_t *g, span_t name, const gnode_t **found)
{
    uint64_t high;
    size_t at = (size_t)hash(name, &high) & g->mask;
    for (int probe = 0; probe < PROBE_CAP; probe++, at = (at + 1) & g->mask) {
        Py_ssize_t k = g->slots[at];
        if (k == 0) {
            *found = NULL;
            return OK;
        }
        const gnode_t *nd = &g->nodes[k - 1];
        if (nd->name_len == name.n && memcmp(nd->name, name.p, (size_t)name.n) == 0) {
            *found = nd;
            return OK;
        }
    }
    return PY;
}

/* graph_def._graph's node index over graph_def's bytes: every field walked, each node (field 1)
 * keyed by its leading name. OK, PY or ERR. */
int cwg_index_graph(const unsigned char *b, Py_ssize_t end, graph_t *g)
{
    Py_ssize_t pos = 0;
    uint64_t number;
    int wire, r;
    span_t v;
    while ((r = next_field(b, &pos, end, &number, &wire, &v)) == 1) {
        if (number != 1 || wire != 2)
            continue;
        span_t name;
        Py_ssize_t after;
        if (short_field(v.p, v.n, 0, 0x0A, &name, &after) != 1)
            return PY;
        if (g->n == g->cap) {
            Py_ssize_t cap = g->cap ? 2 * g->cap : 256;
            gnode_t *grown = PyMem_Realloc(g->nodes, (size_t)cap * sizeof(gnode_t));
            if (grown == NULL) {
                PyErr_NoMemory();
                return ERR;
            }
            g->nodes = grown;
            g->cap = cap;
        }
        g->nodes[g->n++] = (gnode_t){v.p, v.n, name.n, after, name.p};
    }
    if (r < 0)
        return PY;
    size_t size = 16;
    while (size < 2 * (size_t)g->n)
        size *= 2;
    g->slots = PyMem_Calloc(size, sizeof(Py_ssize_t));
    if (g->slots == NULL) {
        PyErr_NoMemory();
        return ERR;
    }
    g->mask = size - 1;
    for (Py_ssize_t i = 0; i < g->n; i++) {
        span_t name = {g->nodes[i].name, g->nodes[i].name_len};
        uint64_t high;
        size_t at = (size_t)hash(name, &high) & g->mask;
        int probe = 0;
        if (high & 0x8080808080808080ULL)
            return PY; /* not ASCII: Python compares the names decoded */
        for (; g->slots[at] != 0; probe++, at = (at + 1) & g->mask) {
            const gnode_t *other = &g->nodes[g->slots[at] - 1];
            if (probe >= PROBE_CAP || (other->name_len == name.n &&
                                       memcmp(other->name, name.p, (size_t)name.n) == 0))
                return PY; /* too many collisions, or two nodes of one name */
        }
        g->slots[at] = i + 1;
    }
    return OK;
}

/* graph_nodes.decode_node: the node's op, data inputs (op names) and, for a Const, the TensorProto
 * its strings are read from; each message it walks is walked whole and strictly. OK, PY or ERR. */
int cwg_decode_node(const gnode_t *nd, decoded_t *d)
{
    Py_ssize_t pos = 0;
    uint64_t number;
    int wire, r;
    span_t v;
    d->op = (span_t){nd->node, 0};
    d->tensor = (span_t){NULL, -1};
    d->n_inputs = 0;
    while ((r = next_field(nd->node, &pos, nd->len, &number, &wire, &v)) == 1) {
        if (wire != 2)
            continue;
        if (number == 2) {
            d->op = v;
        } else if (number == 3 && !(v.n > 0 && v.p[0] == '^')) {
            if (!ascii(v))
                return PY;
            if (d->n_inputs == d->cap) {
                Py_ssize_t cap = d->cap ? 2 * d->cap : 64;
                span_t *grown = PyMem_Realloc(d->inputs, (size_t)cap * sizeof(span_t));
                if (grown == NULL) {
                    PyErr_NoMemory();
                    return ERR;
                }
                d->inputs = grown;
                d->cap = cap;
            }
            d->inputs[d->n_inputs++] = op_name(v);
        } else if (number == 5 && equals(d->op, "Const")) { /* attr entry {1: key, 2: value} */
            Py_ssize_t at = 0;
            span_t key = {v.p, 0}, attr = {NULL, -1}, f;
            int rr;
            while ((rr = next_field(v.p, &at, v.n, &number, &wire, &f)) == 1) {
                if (wire == 2 && number == 1)
                    key = f;
                else if (wire == 2 && number == 2)
                    attr = f;
            }
            if (rr < 0)
                return PY;
            if (!equals(key, "value") || attr.n < 0)
                continue;
            at = 0;
            while ((rr = next_field(attr.p, &at, attr.n, &number, &wire, &f)) == 1) {
                if (wire != 2 || number != 8) /* AttrValue.tensor */
                    continue;
                Py_ssize_t sat = 0;
                span_t s;
                int sr;
                while ((sr = next_field(f.p, &sat, f.n, &number, &wire, &s)) == 1)
                    ;
                if (sr < 0)
                    return PY;
                d->tensor = f;
            }
            if (rr < 0)
                return PY;
        }
    }
    return r < 0 ? PY : OK;
}

/* LazyNodes.head: OK with *found (0: no such node) and the node's op and first data input (n 0:
 * none), PY or ERR. */
int cwg_head(const graph_t *g, span_t name, int *found, span_t *op, span_t *first,
                decoded_t *d)
{
    const gnode_t *nd;
    span_t o, f;
    Py_ssize_t after, after2;
    if (cwg_lookup(g, name, &nd) != OK)
        return PY;
    *found = nd != NULL;
    if (nd == NULL)
        return OK;
    int r = short_field(nd->node, nd->len, nd->after, 0x12, &o, &after);
    if (r < 0)
        return PY;
    if (r == 1) {
        int r2 = short_field(nd->node, nd->len, after, 0x1A, &f, &after2);
        if (r2 < 0)
            return PY;
        if (r2 == 0 || !(f.n > 0 && f.p[0] == '^')) {
            if (r2 == 1 && !ascii(f))
                return PY;
            *op = o;
            *first = r2 == 1 ? op_name(f) : (span_t){nd->node, 0};
            return OK;
        }
    }
    if ((r = cwg_decode_node(nd, d)) != OK)
        return r;
    *op = d->op;
    *first = d->n_inputs ? d->inputs[0] : (span_t){nd->node, 0};
    return OK;
}

/* graph_def.through_reads: *name becomes the op it reads (at most 16 reads). OK, PY or ERR. */
int cwg_through_reads(const graph_t *g, span_t *name, decoded_t *d)
{
    for (int i = 0; i < 16; i++) {
        int found, r;
        span_t op, first;
        if ((r = cwg_head(g, *name, &found, &op, &first, d)) != OK)
            return r;
        if (!found || first.n == 0 ||
            !(equals(op, "Identity") || equals(op, "ReadVariableOp") || equals(op, "Snapshot")))
            break;
        *name = first;
    }
    return OK;
}

