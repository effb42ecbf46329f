#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char word[64];
    unsigned long count;
};

struct table {
    struct entry *entries;
    size_t len, cap;
};

static int compare(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    return strcmp(x->word, y->word);
}

static struct entry *find_or_add(struct table *t, const char *word)
{
    for (size_t i = 0; i < t->len; i++)
        if (!strcmp(t->entries[i].word, word))
            return &t->entries[i];
    if (t->len == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        struct entry *grown = realloc(t->entries, cap * sizeof(struct entry));
        if (!grown)
            return NULL;
        t->entries = grown;
        t->cap = cap;
    }
    struct entry *e = &t->entries[t->len++];
    snprintf(e->word, sizeof e->word, "%s", word);
    e->count = 0;
    return e;
}

int main(int argc, char *argv[])
{
    FILE *in = argc > 1 ? fopen(argv[1], "r") : stdin;
    if (!in) {
        fprintf(stderr, "cannot open %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    struct table t = {0};
    char word[64];
    int c, n = 0;
    while ((c = fgetc(in)) != EOF) {
        if (isalpha(c) && n < (int)sizeof word - 1) {
            word[n++] = (char)tolower(c);
        } else if (n > 0) {
            word[n] = '\0';
            struct entry *e = find_or_add(&t, word);
            if (e)
                e->count++;
            n = 0;
        }
    }
    qsort(t.entries, t.len, sizeof *t.entries, compare);
    for (size_t i = 0; i < t.len && i < 10; i++)
        printf("%7lu %s\n", t.entries[i].count, t.entries[i].word);
    free(t.entries);
    if (in != stdin)
        fclose(in);
    return 0;
}
