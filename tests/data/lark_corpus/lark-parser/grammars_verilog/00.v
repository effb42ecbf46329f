module counter(clk, rst, q);
  input clk;
  input rst;
  output q;
endmodule
