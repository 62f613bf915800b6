/* What cwire_graph.c (a .meta's graph_def: its node index, nodes decoded, reads followed) and
 * cwire_saver.c (the Saver's save op: save_sources) share. See cwire_saver.c. */
#ifndef CKPT_TOOLS_CWIRE_GRAPH_H
#define CKPT_TOOLS_CWIRE_GRAPH_H

#include "cwire.h"

#define OK 0
#define PY 1   /* the Python path decides this file */
#define ERR -1 /* a Python exception is set (memory) */
#define PROBE_CAP 512 /* a hash chain this long (colliding names, hostile): handed to Python */

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} span_t;

typedef struct {
    const unsigned char *node; /* a NodeDef's bytes */
    Py_ssize_t len, name_len, after; /* the name is node[2..]: its first field, one-byte tag */
    const unsigned char *name;
} gnode_t;

typedef struct {
    gnode_t *nodes;
    Py_ssize_t n, cap;
    Py_ssize_t *slots; /* index + 1 into nodes; 0: empty */
    size_t mask;
} graph_t;

typedef struct { /* graph_nodes.decode_node's result, as spans of the node's bytes */
    span_t op, tensor; /* tensor: the Const's last string-holding TensorProto (n < 0: none) */
    span_t *inputs;
    Py_ssize_t n_inputs, cap;
} decoded_t;

/* One field of meta._fields' strict walk: 1 (f, wire, value filled), 0 at the end, -1 where
 * the Python walk raises (truncated, field number 0, a group wire type). */
static inline int next_field(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *number,
                      int *wire, span_t *value)
{
    uint64_t tag, v;
    if (*pos >= end)
        return 0;
    if (cw_varint64(b, pos, end, &tag) < 0 || (tag >> 3) == 0)
        return -1;
    *number = tag >> 3;
    *wire = (int)(tag & 7);
    switch (*wire) {
    case 2:
        if (cw_varint64(b, pos, end, &v) < 0 || v > (uint64_t)(end - *pos))
            return -1;
        value->p = b + *pos;
        value->n = (Py_ssize_t)v;
        *pos += (Py_ssize_t)v;
        return 1;
    case 0:
        return cw_varint64(b, pos, end, &v) < 0 ? -1 : 1;
    case 1:
    case 5:
        v = *wire == 1 ? 8 : 4;
        if (v > (uint64_t)(end - *pos))
            return -1;
        *pos += (Py_ssize_t)v;
        return 1;
    default:
        return -1;
    }
}

static inline int ascii(span_t s)
{
    for (Py_ssize_t i = 0; i < s.n; i++)
        if (s.p[i] >= 0x80)
            return 0;
    return 1;
}

static inline int equals(span_t s, const char *text)
{
    size_t n = strlen(text);
    return (size_t)s.n == n && memcmp(s.p, text, n) == 0;
}

/* graph_nodes.op_name of an input that does not start with "^" (ASCII): up to its first ":". */
static inline span_t op_name(span_t s)
{
    for (Py_ssize_t i = 0; i < s.n; i++) {
        if (s.p[i] == ':') {
            s.n = i;
            break;
        }
    }
    return s;
}

int cwg_index_graph(const unsigned char *b, Py_ssize_t end, graph_t *g);
int cwg_lookup(const graph_t *g, span_t name, const gnode_t **found);
int cwg_decode_node(const gnode_t *nd, decoded_t *d);
int cwg_through_reads(const graph_t *g, span_t *name, decoded_t *d);
int cwg_head(const graph_t *g, span_t name, int *found, span_t *op, span_t *first, decoded_t *d);

#endif
