char digit_char(int d){return 48+d;}int print_number(int n){// Print n in decimal, most significant digit first.
if(n>=10){print_number (n/10);}putchar (digit_char(n-( n/10 )*10));return 0;}