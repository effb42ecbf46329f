int countdown(int n){// Print n, n-1, ..., 1 one per line.
while(n>0){print_number (n);putchar (10);n = n-1;}return 0;}