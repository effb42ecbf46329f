int gcd_of(int a){int b = 36;while(b!=0){int t = b;b = a-( a/b )*b;a = t;}return a;}int lcm(int a){// Least common multiple with 36.
return a/gcd_of(a)*36;}