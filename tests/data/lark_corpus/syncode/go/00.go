package main

import "fmt"

func main() {
	x := 10
	for i := 0; i < x; i++ {
		fmt.Println(i)
	}
}
