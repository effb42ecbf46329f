package main

import (
	"fmt"
	"math"
	"strings"
)

type Shape interface {
	Area() float64
	Perimeter() float64
	fmt.Stringer
}

type Rect struct{ W, H float64 }
type Circle struct {
	R float64 // radius
}

func (r Rect) Area() float64      { return r.W * r.H }
func (r Rect) Perimeter() float64 { return 2 * (r.W + r.H) }
func (r Rect) String() string     { return fmt.Sprintf("Rect(%gx%g)", r.W, r.H) }

func (c *Circle) Area() float64      { return math.Pi * c.R * c.R }
func (c *Circle) Perimeter() float64 { return 2 * math.Pi * c.R }
func (c *Circle) String() string     { return "Circle(" + fmt.Sprint(c.R) + ")" }

func describe(s Shape) string {
	switch v := s.(type) {
	case Rect:
		if v.W == v.H {
			return "square"
		}
		return "rectangle"
	case *Circle:
		return "circle"
	default:
		return "unknown"
	}
}

func classify(n int) string {
	switch {
	case n < 0:
		return "negative"
	case n == 0:
		fallthrough
	case n < 10:
		return "small"
	}
	return "large"
}

func main() {
	shapes := []Shape{Rect{3, 4}, &Circle{R: 1.5}, Rect{W: 2, H: 2}}
	var sb strings.Builder
	total := 0.0
outer:
	for i, s := range shapes {
		for j := 0; j < 3; j++ {
			if j == 2 {
				continue outer
			}
		}
		total += s.Area()
		sb.WriteString(fmt.Sprintf("%d: %s %s %.2f\n", i, s, describe(s), s.Perimeter()))
	}
	fmt.Print(sb.String())
	fmt.Println(total, classify(-1), classify(5), 0x1F, 1e3, 'x', `raw
string`)
	m := map[string][]int{"a": {1, 2}, "b": nil}
	if v, ok := m["a"]; ok && len(v) > 1 {
		v[0]++
	}
	x := [...]int{1, 2, 3}
	p := &x
	(*p)[1] = 5
	var f func(int) int = func(n int) int { return n << 2 }
	_ = f
	for range 3 {
		total /= 2
	}
}
