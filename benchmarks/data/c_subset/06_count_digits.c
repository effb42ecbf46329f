int count_digits(int n){// Number of decimal digits of n (0 has one digit).
int digits = 1;if(n<0){n = -n;}while(n>=10){n = n/10;digits = digits+1;}return digits;}