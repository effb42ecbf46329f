int abs_value(int x){if(x<0){return -x;}return x;}int clamp_byte(int x){// Saturate to the range of an unsigned char.
if(x>255){return 255;}if(x<0){return 0;}return x;}