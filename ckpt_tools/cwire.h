/* Shared by the sources of ckpt_tools.cwire: cwire.c (the module), cwire_index.c (.index data
 * blocks), cwire_meta.c (.meta VariableDefs), cwire_graph.c and cwire_saver.c (.meta save ops).
 * See cwire.c for what the extension is. */
#ifndef CKPT_TOOLS_CWIRE_H
#define CKPT_TOOLS_CWIRE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Interned at import (cwire.c): the __dict__ keys of the TensorEntry and MetaVariable objects
 * built here, in formats/entry.py's and formats/meta.py's order, and ":0". */
extern PyObject *cw_name, *cw_dtype, *cw_shape, *cw_shard_id, *cw_offset, *cw_stored_bytes,
    *cw_crc32c, *cw_slices, *cw_extra, *cw_checkpoint_key, *cw_trainable, *cw_partition,
    *cw_colon0;

/* bundle_wire.decode_varint: at most 10 bytes, the value kept to 64 bits. 0 or -1. */
static inline int cw_varint64(const unsigned char *b, Py_ssize_t *pos, Py_ssize_t end, uint64_t *out)
{
    uint64_t r = 0;
    Py_ssize_t p = *pos;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return -1;
        unsigned char c = b[p++];
        r |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *pos = p;
            *out = r;
            return 0;
        }
    }
    return -1;
}

PyObject *cw_bundle_block(PyObject *self, PyObject *args);
PyObject *cw_variable_list(PyObject *self, PyObject *args);
PyObject *cw_save_sources(PyObject *self, PyObject *args);
extern const char cw_bundle_block_doc[], cw_variable_list_doc[], cw_save_sources_doc[];

#endif
