/* Helpers the parts of `codemask.engine._native` share: int32 buffers, the argument checks, open-addressing
 * hash maps (int32 and uint64 keys), the sort comparisons and the views of a core's arrays kept between calls.
 */
#include "_native.h"

/* A tuple of the `n` ints at `a`. */
PyObject *cm_int_tuple(const int32_t *a, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLong(a[i]);
        if (!item) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

PyObject *cm_buf_bytes(const IntBuf *b) {
    return PyBytes_FromStringAndSize((const char *)b->data, b->size * (Py_ssize_t)sizeof(int32_t));
}

int cm_bad(const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    return -1;
}

int cm_need(const Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *name) {
    if (view->len != itemsize * count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, itemsize * count, view->len);
        return -1;
    }
    return 0;
}

int cm_map_init(IntMap *m, int bits) {
    size_t cap = (size_t)1 << bits;
    m->key = (int32_t *)malloc(cap * sizeof(int32_t));
    m->value = (int32_t *)malloc(cap * sizeof(int32_t));
    m->stamp = (uint32_t *)calloc(cap, sizeof(uint32_t));
    m->gen = 1;
    m->bits = bits;
    m->used = 0;
    if (!m->key || !m->value || !m->stamp) {
        free(m->key);
        free(m->value);
        free(m->stamp);
        m->key = m->value = NULL;
        m->stamp = NULL;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void cm_map_free(IntMap *m) {
    free(m->key);
    free(m->value);
    free(m->stamp);
}

void cm_map_clear(IntMap *m) {
    m->used = 0;
    if (++m->gen == 0) {
        memset(m->stamp, 0, ((size_t)1 << m->bits) * sizeof(uint32_t));
        m->gen = 1;
    }
}

static int map_grow(IntMap *m) {
    IntMap bigger;
    if (cm_map_init(&bigger, m->bits + 1)) return -1;
    size_t cap = (size_t)1 << m->bits;
    for (size_t i = 0; i < cap; i++) {
        if (m->stamp[i] != m->gen) continue;
        size_t j = map_slot(&bigger, m->key[i]);
        bigger.key[j] = m->key[i];
        bigger.value[j] = m->value[i];
        bigger.stamp[j] = bigger.gen;
        bigger.used++;
    }
    cm_map_free(m);
    *m = bigger;
    return 0;
}

/* Store `key` (absent) -> `value`. */
int cm_map_put(IntMap *m, int32_t key, int32_t value) {
    if (2 * (m->used + 1) > ((Py_ssize_t)1 << m->bits) && map_grow(m)) return -1;
    size_t i = map_slot(m, key);
    m->key[i] = key;
    m->value[i] = value;
    m->stamp[i] = m->gen;
    m->used++;
    return 0;
}

int cm_u64_init(U64Map *m, int bits) {
    m->keys = (uint64_t *)calloc((size_t)1 << bits, sizeof(uint64_t));
    m->values = (int32_t *)malloc(((size_t)1 << bits) * sizeof(int32_t));
    m->bits = bits;
    m->used = 0;
    if (!m->keys || !m->values) {
        free(m->keys);
        free(m->values);
        m->keys = NULL;
        m->values = NULL;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* Empty the map (its table keeps its size). */
void cm_u64_clear(U64Map *m) {
    if (m->used) memset(m->keys, 0, ((size_t)1 << m->bits) * sizeof(uint64_t));
    m->used = 0;
}

int cm_u64_put(U64Map *m, uint64_t key, int32_t value) {
    if (2 * (m->used + 1) > ((Py_ssize_t)1 << m->bits)) {
        U64Map bigger;
        if (cm_u64_init(&bigger, m->bits + 1)) return -1;
        for (size_t i = 0; i < ((size_t)1 << m->bits); i++) {
            if (!m->keys[i]) continue;
            size_t j = u64_slot(&bigger, m->keys[i] - 1);
            bigger.keys[j] = m->keys[i];
            bigger.values[j] = m->values[i];
            bigger.used++;
        }
        free(m->keys);
        free(m->values);
        *m = bigger;
    }
    size_t i = u64_slot(m, key);
    if (!m->keys[i]) m->used++;
    m->keys[i] = key + 1;
    m->values[i] = value;
    return 0;
}

/* A writable view of the array `owner.<name>` holding at least `count` items of `itemsize` bytes (errors
 * name it as `label.<name>`). */
int cm_array_view(PyObject *owner, const char *label, const char *name, Py_ssize_t itemsize, Py_ssize_t count,
                  Py_buffer *view) {
    PyObject *array = PyObject_GetAttrString(owner, name);
    if (!array) return -1;
    int status = PyObject_GetBuffer(array, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
    Py_DECREF(array);
    if (status) return -1;
    if (view->itemsize != itemsize || view->len < itemsize * count) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s.%s: fewer than %zd items of %zd bytes", label, name, count, itemsize);
        return -1;
    }
    return 0;
}

static void held_release(HeldView *h) {
    if (!h->array) return;
    PyBuffer_Release(&h->view);
    Py_CLEAR(h->array);
}

void cm_held_free(HeldView *h) {
    held_release(h);
    Py_CLEAR(h->name);
}

/* `array_view` of `owner.<name>`, kept in `h` between calls and taken again only when the
 * attribute is another array (the cores grow their arrays into new ones): numpy's buffer export
 * cost more than the rest of a parser step's bookkeeping. */
int cm_held_view(HeldView *h, PyObject *owner, const char *label, const char *name, Py_ssize_t itemsize,
                 Py_ssize_t count) {
    if (!h->name && !(h->name = PyUnicode_InternFromString(name))) return -1;
    PyObject *now = PyObject_GetAttr(owner, h->name);
    if (!now) return -1;
    if (now == h->array) {
        Py_DECREF(now);
    } else {
        held_release(h);
        if (PyObject_GetBuffer(now, &h->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) {
            Py_DECREF(now);
            return -1;
        }
        h->array = now;
    }
    if (h->view.itemsize != itemsize || h->view.len < itemsize * count) {
        held_release(h);
        PyErr_Format(PyExc_ValueError, "%s.%s: fewer than %zd items of %zd bytes", label, name, count, itemsize);
        return -1;
    }
    return 0;
}

int cm_cmp_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int cm_cmp_uint64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}
