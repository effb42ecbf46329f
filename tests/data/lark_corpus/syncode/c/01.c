float average(float a, float b) {
    return (a + b) / 2;
}

void report(int n) {
    /* print the value
       of n */
    printf(n);
    if (n >= 10) {
        report(n - 10);
    } else {
        done();
    }
}
