int count_bits(int n){// Population count without bitwise operators.
int bits = 0;while(n>0){bits = bits+n-( n/2 )*2;n = n/2;}return bits;}