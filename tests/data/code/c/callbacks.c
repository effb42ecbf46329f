#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*handler_fn)(int);
typedef int (*cmp_fn)(const void *, const void *);

static volatile sig_atomic_t stop;

static void on_signal(int sig) { stop = sig; }

static int log_message(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int log_message(const char *level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = fprintf(stderr, "[%s] ", level);
    n += vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return n;
}

static int by_value(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

struct plugin {
    const char *name;
    int (*init)(void);
    void (*run)(struct plugin *self, int argc, char **argv);
};

static int noop_init(void) { return 0; }
static void noop_run(struct plugin *self, int argc, char **argv)
{
    (void)argv;
    log_message("info", "%s called with %d args", self->name, argc);
}

static struct plugin plugins[] = {
    {"noop", noop_init, noop_run},
    {.name = "other", .init = noop_init, .run = noop_run},
};

int main(int argc, char **argv)
{
    handler_fn previous = signal(SIGINT, on_signal);
    int data[] = {5, 3, 9, 1};
    cmp_fn cmp = by_value;
    qsort(data, sizeof data / sizeof *data, sizeof(int), cmp);
    for (unsigned i = 0; i < sizeof plugins / sizeof plugins[0]; i++) {
        struct plugin *p = plugins + i;
        if (p->init() != 0)
            continue;
        p->run(p, argc, argv);
    }
    signal(SIGINT, previous);
    return stop ? EXIT_FAILURE : EXIT_SUCCESS;
}
