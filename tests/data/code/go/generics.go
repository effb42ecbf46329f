package collections

import "sort"

// Number is a constraint for numeric types.
type Number interface {
	~int | ~int64 | ~float64
}

type Pair[K comparable, V any] struct {
	Key   K
	Value V
}

type Stack[T any] struct{ items []T }

func (s *Stack[T]) Push(v T) { s.items = append(s.items, v) }

func (s *Stack[T]) Pop() (T, bool) {
	var zero T
	if len(s.items) == 0 {
		return zero, false
	}
	v := s.items[len(s.items)-1]
	s.items = s.items[:len(s.items)-1]
	return v, true
}

func Sum[T Number](xs ...T) (total T) {
	for _, x := range xs {
		total += x
	}
	return
}

func Map[T, U any](xs []T, f func(T) U) []U {
	out := make([]U, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func SortedKeys[K interface{ ~string }, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	return keys
}

func Entries[K ~string, V any](m map[K]V) (ps []Pair[K, V]) {
	for _, k := range SortedKeys(m) {
		ps = append(ps, Pair[K, V]{Key: k, Value: m[k]})
	}
	return ps
}
