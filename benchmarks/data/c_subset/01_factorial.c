int factorial(int n){// Iterative factorial; n! overflows int for n > 12.
int result = 1;for(int i = 2; i<=n; i = i+1){result = result*i;}return result;}