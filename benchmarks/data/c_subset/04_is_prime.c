int is_prime(int n){// Trial division up to the square root.
if(n<2){return 0;}for(int d = 2; d*d<=n; d = d+1){int remainder = n-( n/d )*d;if(remainder==0){return 0;}}return 1;}