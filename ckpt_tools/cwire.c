/* Optional compiled decoders for what `ckpt list` reads (ckpt_tools.cwire): the .index entries
 * (bundle_block), the .meta's variable collections (variable_list) and the keys its Saver's save
 * op wrote from which variables (save_sources).
 *
 * An accelerator, never a second parser: it accepts only a strict subset of what the pure-Python
 * path (formats/table.py, formats/bundle_wire.py, formats/bundle.py, formats/meta.py,
 * formats/graph_def.py, formats/meta_saver.py) accepts - the layout
 * TensorFlow writes for almost every tensor - decodes that subset exactly as the Python path
 * does, and answers None for anything else (a non-canonical entry, a slice key, a key that is not
 * UTF-8, anything the Python path would refuse). The caller then runs the Python path over the
 * same block, which decodes it or raises the error it always raised: errors and their messages
 * come from one place only. Every read is bounds-checked against the block's entry area; the
 * input is an untrusted file.
 *
 * This file is the module; cwire_index.c, cwire_meta.c, cwire_graph.c and cwire_saver.c hold the
 * decoders, cwire.h what they share. Built by setup.py when a C compiler is there
 * (Extension(optional=True)); without it the Python path does the whole job, with the same
 * results (tests/test_cwire.py and tests/test_cwire_graph.py hold the two together).
 */
#include "cwire.h"

PyObject *cw_name, *cw_dtype, *cw_shape, *cw_shard_id, *cw_offset, *cw_stored_bytes, *cw_crc32c,
    *cw_slices, *cw_extra, *cw_checkpoint_key, *cw_trainable, *cw_partition, *cw_colon0;

static PyMethodDef methods[] = {
    {"bundle_block", cw_bundle_block, METH_VARARGS, cw_bundle_block_doc},
    {"variable_list", cw_variable_list, METH_VARARGS, cw_variable_list_doc},
    {"save_sources", cw_save_sources, METH_VARARGS, cw_save_sources_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cwire",
    "Compiled fast paths of the .index entry and .meta VariableDef decoders.", -1, methods,
};

PyMODINIT_FUNC PyInit_cwire(void)
{
    static const char *names[] = {"name",   "dtype",          "shape",     "shard_id",
                                  "offset", "stored_bytes",   "crc32c",    "slices",
                                  "extra",  "checkpoint_key", "trainable", "partition",
                                  ":0"};
    PyObject **slots[] = {&cw_name,   &cw_dtype,          &cw_shape,     &cw_shard_id,
                          &cw_offset, &cw_stored_bytes,   &cw_crc32c,    &cw_slices,
                          &cw_extra,  &cw_checkpoint_key, &cw_trainable, &cw_partition,
                          &cw_colon0};
    for (int i = 0; i < 13; i++) {
        if (*slots[i] == NULL && (*slots[i] = PyUnicode_InternFromString(names[i])) == NULL)
            return NULL;
    }
    return PyModule_Create(&module);
}
