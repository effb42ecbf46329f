int collatz_steps(int n){// Steps of the 3n+1 map until n reaches 1.
int steps = 0;while(n!=1){if(n-( n/2 )*2==0){n = n/2;}else{n = 3*n+1;}steps = steps+1;}return steps;}