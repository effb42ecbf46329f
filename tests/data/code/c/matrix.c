#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define N 3

typedef double matrix[N][N];

enum op { OP_ADD = 1, OP_MUL, OP_TRANSPOSE = 1 << 4 };

union number {
    int64_t i;
    double d;
    unsigned char bytes[sizeof(double)];
};

struct flags {
    unsigned int visible : 1;
    unsigned int dirty : 1;
    unsigned int : 6;
};

static const matrix identity = {
    [0] = {1.0, 0.0, 0.0},
    [1][1] = 1.0,
    [2] = {[2] = 1.0},
};

static void multiply(const matrix a, const matrix b, matrix out)
{
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) {
            double sum = 0.0;
            for (int k = 0; k < N; k++)
                sum += a[i][k] * b[k][j];
            out[i][j] = sum;
        }
    }
}

static bool nearly_equal(double x, double y) { return fabs(x - y) < 1e-9; }

static int apply(enum op op, int (*fn)(int, int), int x, int y)
{
    switch (op) {
    case OP_ADD:
    case OP_MUL:
        return fn(x, y);
    default:
        break;
    }
    return -1;
}

static int add(int a, int b) { return a + b; }

int main(void)
{
    matrix m = {{2, 0, 0}, {0, 2, 0}, {0, 0, 2}}, r;
    multiply(m, identity, r);
    union number n = {.d = 3.5};
    struct flags f = {0};
    f.visible = 1;
    uint32_t mask = 0xFFu & ~(1u << 3);
    double values[] = {1.5, -2.25e-3, .5, 0x1p-2};
    size_t count = sizeof values / sizeof values[0];
    printf("%d %d %u %zu %lld\n", nearly_equal(r[1][1], 2.0), apply(OP_ADD, add, 2, 3), mask, count,
           (long long)n.i);
    char *s = (char[]){"compound"};
    int total = 0, i = 0;
    do {
        total += i % 2 == 0 ? i : -i;
    } while (++i < 10);
    goto done;
done:
    return total > 0 && s[0] == 'c' ? 0 : 1;
}
