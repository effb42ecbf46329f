/* The few loops of a mask's and a classification's bookkeeping that numpy did with a call per step:
 * `set_bits_where`, `distinct` and `pack_rows`.
 */
#include "_native.h"

/* set_bits_where(words, tokens, offsets, ok, group): set in the uint32 row `words` the bits of the
 * tokens of every residual r with ok[r] (a mask's uncertain tokens whose residual the parser
 * accepts): residual r's tokens are tokens[offsets[r]:offsets[r + 1]] (int32 bytes). `group`, the
 * packed bits of all the tokens (or empty), lets a mostly accepted group be set as a whole, less
 * the tokens of the residuals refused: the large groups are 40,000 tokens or more, nearly all
 * accepted or nearly all refused, and a bit per token was ~2 ns each. */
PyObject *cm_set_bits_where(PyObject *self, PyObject *args) {
    Py_buffer words, ok;
    PyObject *tokens, *offsets, *group;
    if (!PyArg_ParseTuple(args, "w*SSy*S", &words, &tokens, &offsets, &ok, &group)) return NULL;
    PyObject *result = NULL;
    uint32_t *scratch = NULL;
    Py_ssize_t nwords = words.len / (Py_ssize_t)sizeof(uint32_t), residuals = ok.len;
    Py_ssize_t count = PyBytes_GET_SIZE(tokens) / (Py_ssize_t)sizeof(int32_t);
    const int32_t *tok = (const int32_t *)PyBytes_AS_STRING(tokens), *off = (const int32_t *)PyBytes_AS_STRING(offsets);
    const uint8_t *good = (const uint8_t *)ok.buf;
    if (cm_need(&words, sizeof(uint32_t), nwords, "words") ||
        PyBytes_GET_SIZE(offsets) != (residuals + 1) * (Py_ssize_t)sizeof(int32_t) ||
        PyBytes_GET_SIZE(tokens) % (Py_ssize_t)sizeof(int32_t) ||
        (PyBytes_GET_SIZE(group) && PyBytes_GET_SIZE(group) != words.len)) {
        if (!PyErr_Occurred()) cm_bad("set_bits_where: tokens, offsets, ok and group do not fit together");
        goto done;
    }
    Py_ssize_t accepted = 0;
    uint8_t seen = 0;
    for (Py_ssize_t r = 0; r < residuals; r++) {
        accepted += good[r];
        seen |= good[r];
    }
    if (seen > 1) {
        cm_bad("set_bits_where: ok must be 0/1 bytes");
        goto done;
    }
    int whole = PyBytes_GET_SIZE(group) && 2 * accepted >= residuals; /* all, less the refused */
    uint32_t *out = (uint32_t *)words.buf;
    if (whole) {
        if (!(scratch = (uint32_t *)malloc((size_t)words.len))) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(scratch, PyBytes_AS_STRING(group), (size_t)words.len);
    }
    /* whole: the refused residuals' tokens; else the accepted (memchr skips the others when they are few) */
    uint8_t target = whole ? 0 : 1;
    int sparse = 8 * (whole ? residuals - accepted : accepted) < residuals;
    for (Py_ssize_t r = 0; r < residuals; r++) {
        if (sparse) {
            const uint8_t *at = (const uint8_t *)memchr(good + r, target, (size_t)(residuals - r));
            if (!at) break;
            r = at - good;
        } else if (good[r] != target) {
            continue;
        }
        if (off[r] < 0 || off[r] > off[r + 1] || off[r + 1] > count) {
            index_error("residual offsets out of range");
            goto done;
        }
        for (int32_t j = off[r]; j < off[r + 1]; j++) {
            int32_t t = tok[j];
            if (t < 0 || t / 32 >= nwords) {
                index_error("token out of range");
                goto done;
            }
            if (whole) {
                scratch[t >> 5] &= ~((uint32_t)1 << (t & 31));
            } else {
                out[t >> 5] |= (uint32_t)1 << (t & 31);
            }
        }
    }
    for (Py_ssize_t w = 0; whole && w < nwords; w++) out[w] |= scratch[w];
    result = Py_None;
    Py_INCREF(result);
done:
    free(scratch);
    PyBuffer_Release(&words);
    PyBuffer_Release(&ok);
    return result;
}

/* distinct(slots, numbers) -> (keys, chosen, group): `np.unique(numbers)` with an index and the
 * inverse, through the scratch table `slots` (int32, one entry per possible number: the numbers
 * are dense suffix numbers, `lexer_masks.ResidualSets._distinct`): the sorted distinct numbers
 * (int64 bytes), the position of one occurrence of each (int32 bytes) and which one each number
 * is (int64 bytes). A residual set's interning made ten numpy calls of it, most on a few dozen
 * numbers. */
PyObject *cm_distinct(PyObject *self, PyObject *args) {
    Py_buffer slots_view, numbers_view;
    if (!PyArg_ParseTuple(args, "w*y*", &slots_view, &numbers_view)) return NULL;
    PyObject *result = NULL, *keys_out = NULL, *chosen_out = NULL, *group_out = NULL;
    Py_ssize_t n = numbers_view.len / (Py_ssize_t)sizeof(int64_t), size = slots_view.len / (Py_ssize_t)sizeof(int32_t);
    int32_t *slots = (int32_t *)slots_view.buf;
    const int64_t *numbers = (const int64_t *)numbers_view.buf;
    if (cm_need(&numbers_view, sizeof(int64_t), n, "numbers") || cm_need(&slots_view, sizeof(int32_t), size, "slots")) goto done;
    if (n > INT32_MAX) {
        cm_bad("too many numbers");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (numbers[i] < 0 || numbers[i] >= size) {
            index_error("number out of the slots");
            goto done;
        }
        slots[numbers[i]] = (int32_t)i; /* where a number repeats, one of its positions is left */
    }
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) count += slots[numbers[i]] == i;
    keys_out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    chosen_out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int32_t));
    group_out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!keys_out || !chosen_out || !group_out) goto done;
    int64_t *keys = (int64_t *)PyBytes_AS_STRING(keys_out), *group = (int64_t *)PyBytes_AS_STRING(group_out);
    int32_t *chosen = (int32_t *)PyBytes_AS_STRING(chosen_out);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slots[numbers[i]] == i) keys[k++] = numbers[i];
    }
    cm_sort_int64(keys, count);
    for (Py_ssize_t j = 0; j < count; j++) {
        chosen[j] = slots[keys[j]];
        slots[keys[j]] = (int32_t)j;
    }
    for (Py_ssize_t i = 0; i < n; i++) group[i] = slots[numbers[i]];
    result = PyTuple_Pack(3, keys_out, chosen_out, group_out);
done:
    Py_XDECREF(keys_out);
    Py_XDECREF(chosen_out);
    Py_XDECREF(group_out);
    PyBuffer_Release(&slots_view);
    PyBuffer_Release(&numbers_view);
    return result;
}

/* pack_rows(words, order, lo, hi): set in the uint32 row `words` the bit of token order[row] for
 * every trie row in each range lo[i]:hi[i] (int64): a lexer state's accepted and failing tokens, as
 * `bitmask.pack_ids` of `TokenTrie.token_ids` of the rows, without a bool array of the
 * vocabulary (a third of a classification's time besides the C scan went to those, ad hoc). */
PyObject *cm_pack_rows(PyObject *self, PyObject *args) {
    Py_buffer words, order, lo, hi;
    if (!PyArg_ParseTuple(args, "w*y*y*y*", &words, &order, &lo, &hi)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t nwords = words.len / (Py_ssize_t)sizeof(uint32_t), rows = order.len / (Py_ssize_t)sizeof(int32_t);
    Py_ssize_t ranges = lo.len / (Py_ssize_t)sizeof(int64_t);
    if (cm_need(&words, sizeof(uint32_t), nwords, "words") || cm_need(&order, sizeof(int32_t), rows, "order") ||
        cm_need(&lo, sizeof(int64_t), ranges, "lo") || cm_need(&hi, sizeof(int64_t), ranges, "hi"))
        goto done;
    if (hi.len != lo.len) {
        cm_bad("lo and hi differ in length");
        goto done;
    }
    uint32_t *out = (uint32_t *)words.buf;
    const int32_t *token = (const int32_t *)order.buf;
    const int64_t *first = (const int64_t *)lo.buf, *last = (const int64_t *)hi.buf;
    for (Py_ssize_t i = 0; i < ranges; i++) {
        if (first[i] < 0 || first[i] > last[i] || last[i] > rows) {
            index_error("row range out of the trie");
            goto done;
        }
        for (int64_t row = first[i]; row < last[i]; row++) {
            int32_t t = token[row];
            if (t < 0 || t / 32 >= nwords) {
                index_error("token out of the row");
                goto done;
            }
            out[t >> 5] |= (uint32_t)1 << (t & 31);
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&order);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    return result;
}

/* json_string_chars(matrix, width, lengths) -> the bytes of an int32 array: per trie row (token),
 * twice the characters of a JSON string's content it begins before its first unescaped quote (all
 * of it where it has none), plus one where it has that quote. An escape is one character whether
 * complete or not, a surrogate pair of `\u` escapes one, a UTF-8 character one from its first byte
 * on: what a `maxLength` counts, so that a bounded string's positions are a free string's tokens
 * filtered by this count (`string_chains`). Rows a string cannot hold get a count never read. */
static int32_t json_chars(const uint8_t *b, Py_ssize_t len, int32_t stop, Py_ssize_t *end_of_stop) {
    int32_t count = 0;
    int after_high = 0; /* the last character was a complete `\uD800`-`\uDBFF` escape */
    Py_ssize_t i = 0;
    while (i < len && b[i] != '"') {
        if (b[i] != '\\') {
            if ((b[i] & 0xC0) != 0x80) {
                if (count == stop) *end_of_stop = i; /* (the character past `stop` begins here) */
                count++;
            }
            after_high = 0;
            i++;
            continue;
        }
        int unicode = i + 1 < len && b[i + 1] == 'u';
        int low_half = after_high && unicode; /* the second escape of a pair: the same character */
        if (!low_half && count == stop) *end_of_stop = i;
        count += !low_half;
        Py_ssize_t end = i + (unicode ? 6 : 2);
        after_high = !low_half && unicode && end <= len && (b[i + 2] | 0x20) == 'd' &&
                     ((b[i + 3] >= '8' && b[i + 3] <= '9') || ((b[i + 3] | 0x20) >= 'a' && (b[i + 3] | 0x20) <= 'b'));
        i = end < len ? end : len;
    }
    if (count == stop && i < len) *end_of_stop = i; /* (the closing quote) */
    return 2 * count + (i < len);
}

PyObject *cm_json_string_chars(PyObject *self, PyObject *args) {
    Py_buffer matrix, lengths;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "y*ny*", &matrix, &width, &lengths)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t rows = lengths.len / (Py_ssize_t)sizeof(int32_t);
    if (cm_need(&lengths, sizeof(int32_t), rows, "lengths")) goto done;
    if (width < 1 || matrix.len != rows * width) {
        cm_bad("json_string_chars: matrix is not rows x width bytes");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, rows * (Py_ssize_t)sizeof(int32_t));
    if (!result) goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(result);
    const int32_t *length = (const int32_t *)lengths.buf;
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (length[r] < 0 || length[r] > width) {
            Py_CLEAR(result);
            cm_bad("json_string_chars: a length is outside the matrix");
            goto done;
        }
        Py_ssize_t unused;
        out[r] = json_chars((const uint8_t *)matrix.buf + r * width, length[r], -1, &unused);
    }
done:
    PyBuffer_Release(&matrix);
    PyBuffer_Release(&lengths);
    return result;
}

/* json_char_ends(matrix, width, lengths, rows, chars) -> the bytes of an int32 array: per row of
 * `rows` (int64), the byte where its token's content goes on past `chars` characters (where the
 * next character or the closing quote begins), -1 where it does not: the residual of a token that
 * crosses the end of a block of `chars` characters (`string_chains.CharCounts`). */
PyObject *cm_json_char_ends(PyObject *self, PyObject *args) {
    Py_buffer matrix, lengths, rows;
    Py_ssize_t width, chars;
    if (!PyArg_ParseTuple(args, "y*ny*y*n", &matrix, &width, &lengths, &rows, &chars)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = lengths.len / (Py_ssize_t)sizeof(int32_t), n = rows.len / (Py_ssize_t)sizeof(int64_t);
    if (cm_need(&lengths, sizeof(int32_t), count, "lengths") || cm_need(&rows, sizeof(int64_t), n, "rows")) goto done;
    if (width < 1 || matrix.len != count * width || chars < 0 || chars > INT32_MAX) {
        cm_bad("json_char_ends: matrix is not rows x width bytes, or chars is negative");
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t));
    if (!result) goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(result);
    const int32_t *length = (const int32_t *)lengths.buf;
    const int64_t *row = (const int64_t *)rows.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (row[i] < 0 || row[i] >= count || length[row[i]] < 0 || length[row[i]] > width) {
            Py_CLEAR(result);
            cm_bad("json_char_ends: a row or its length is outside the matrix");
            goto done;
        }
        Py_ssize_t end = -1;
        json_chars((const uint8_t *)matrix.buf + row[i] * width, length[row[i]], (int32_t)chars, &end);
        out[i] = (int32_t)end;
    }
done:
    PyBuffer_Release(&matrix);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&rows);
    return result;
}
