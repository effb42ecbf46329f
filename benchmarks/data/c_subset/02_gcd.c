int gcd(int a){// Euclid's algorithm against a fixed divisor.
int b = 48;while(b!=0){int t = b;b = a-( a/b )*b;a = t;}return a;}