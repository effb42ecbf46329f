int sum_to(int n){int total = 0;int i = 1;while(i<=n){total = total+i;i = i+1;}return total;}int triangular(int n){// Closed form of sum_to.
return n*( n+1 )/2;}