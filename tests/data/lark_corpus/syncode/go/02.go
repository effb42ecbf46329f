package counter

var total int

func Add(n int) (int, error) {
	if n < 0 {
		return 0, nil
	}
	total += n
	return total, nil
}
