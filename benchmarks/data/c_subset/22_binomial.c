int binomial(int n){// C(n, k) for k = 3, multiplicatively, exact at every step.
int k = 3;int result = 1;for(int i = 1; i<=k; i = i+1){result = result*( n-k+i )/i;}return result;}