int isqrt(int n){// Integer square root by binary search on [0, n].
int low = 0;int high = n+1;while(high-low>1){int mid = ( low+high )/2;if(mid*mid<=n){low = mid;}else{high = mid;}}return low;}