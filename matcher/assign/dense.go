// Package assign solves the assignment problems behind cluster pairing: an
// exact dense solver for rectangular cost matrices (Jonker–Volgenant shortest
// augmenting paths with column reduction and augmenting row reduction) and a
// sparse maximum-weight matching solver over candidate lists that scales to
// tens of thousands of GPUs and can be warm-started from the previous round's
// prices.
package assign

import (
	"errors"
	"fmt"
	"math"
)

// ErrInfeasible is returned when no assignment uses only finite costs.
var ErrInfeasible = errors.New("assignment infeasible")

// ErrBadInput classifies malformed problems (NaN costs, wrong sizes).
var ErrBadInput = errors.New("bad assignment problem")

// Dense solves dense rectangular assignment problems. Its zero value is ready;
// reusing one keeps its scratch buffers, so repeated solves do not allocate
// beyond the result.
type Dense struct {
	v, d           []float64
	rowSol, colSol []int
	pred, collist  []int
	free, matches  []int
	colMin         []float64
	colArg         []int
	buf            []float64
	// augmentOnly skips the reductions so tests can check the augmentation
	// phase alone: on small instances the reductions solve nearly everything.
	augmentOnly bool
}

// Result is an assignment: RowCol[i] is the column given to row i, or -1 when
// the matrix has more rows than columns and row i is left out.
type Result struct {
	RowCol []int
	// Total is the sum of the input matrix over the assigned cells.
	Total float64
}

// Minimize assigns min(rows, cols) pairs of a row-major rows×cols cost
// matrix at minimum total cost. +Inf marks a forbidden cell; NaN and -Inf are
// rejected. The matrix is not modified.
func (s *Dense) Minimize(cost []float64, rows, cols int) (Result, error) {
	return s.solve(cost, rows, cols, false)
}

// Maximize is Minimize for weights: it maximises the total, and -Inf marks a
// forbidden cell.
func (s *Dense) Maximize(weight []float64, rows, cols int) (Result, error) {
	return s.solve(weight, rows, cols, true)
}

func (s *Dense) solve(in []float64, rows, cols int, maximize bool) (Result, error) {
	if rows < 0 || cols < 0 || len(in) != rows*cols {
		return Result{}, fmt.Errorf("%w: %d values for a %d×%d matrix", ErrBadInput, len(in), rows, cols)
	}
	res := Result{RowCol: make([]int, rows)}
	for i := range res.RowCol {
		res.RowCol[i] = -1
	}
	if rows == 0 || cols == 0 {
		return res, nil
	}
	// The solver wants rows ≤ cols and costs to minimise; build that matrix
	// once (negating and/or transposing) rather than branching in the hot loop.
	transpose := rows > cols
	n, m := rows, cols
	if transpose {
		n, m = cols, rows
	}
	s.buf = grow(s.buf, n*m)
	c := s.buf
	forbidden := math.Inf(1)
	if maximize {
		forbidden = math.Inf(-1)
	}
	for i := 0; i < rows; i++ {
		row := in[i*cols : (i+1)*cols]
		for j, x := range row {
			if math.IsNaN(x) || math.IsInf(x, 0) && x != forbidden {
				return Result{}, fmt.Errorf("%w: cell (%d,%d) is %v", ErrBadInput, i, j, x)
			}
			if maximize {
				x = -x
			}
			if transpose {
				c[j*m+i] = x
			} else {
				c[i*m+j] = x
			}
		}
	}
	if err := s.lap(c, n, m); err != nil {
		return Result{}, err
	}
	for i := 0; i < n; i++ {
		j := s.rowSol[i]
		if transpose {
			res.RowCol[j] = i
			res.Total += in[j*cols+i]
		} else {
			res.RowCol[i] = j
			res.Total += in[i*cols+j]
		}
	}
	return res, nil
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// lap solves the n×m (n ≤ m) minimisation in c, leaving the row solution in
// s.rowSol. Prices v stay 0 on columns that end unassigned (they only ever
// decrease on columns that get assigned), which is what makes the
// shortest-augmenting-path optimum valid for rectangular problems.
func (s *Dense) lap(c []float64, n, m int) error {
	s.v = grow(s.v, m)
	s.d = grow(s.d, m)
	s.pred = grow(s.pred, m)
	s.collist = grow(s.collist, m)
	s.colSol = grow(s.colSol, m)
	s.rowSol = grow(s.rowSol, n)
	s.free = grow(s.free, n)
	v, colSol, rowSol := s.v, s.colSol, s.rowSol
	for j := range colSol {
		colSol[j] = -1
		v[j] = 0
	}
	for i := range rowSol {
		rowSol[i] = -1
	}
	var numFree int
	if n == m && !s.augmentOnly {
		var err error
		if numFree, err = s.columnReduction(c, n); err != nil {
			return err
		}
	} else {
		for i := 0; i < n; i++ {
			s.free[i] = i
		}
		numFree = n
	}
	for pass := 0; pass < 2 && numFree > 0 && !s.augmentOnly; pass++ {
		var err error
		if numFree, err = s.augmentingRowReduction(c, n, m, numFree); err != nil {
			return err
		}
	}
	for f := 0; f < numFree; f++ {
		if err := s.augment(c, m, s.free[f]); err != nil {
			return err
		}
	}
	return nil
}

// columnReduction is JV's initialisation for square problems: every column's
// price is its minimum, each row takes the cheapest column it is the minimum
// of, and rows assigned once transfer their slack to that column's price.
// It returns the number of rows left free (in s.free).
func (s *Dense) columnReduction(c []float64, n int) (int, error) {
	s.colMin = grow(s.colMin, n)
	s.colArg = grow(s.colArg, n)
	s.matches = grow(s.matches, n)
	colMin, colArg, matches := s.colMin, s.colArg, s.matches
	v, colSol, rowSol := s.v, s.colSol, s.rowSol
	// Row-major scan for column minima: the textbook column-wise scan strides
	// through memory and is several times slower on large matrices.
	copy(colMin, c[:n])
	for j := range colArg {
		colArg[j] = 0
		matches[j] = 0
	}
	for i := 1; i < n; i++ {
		row := c[i*n : (i+1)*n]
		for j, x := range row {
			if x < colMin[j] {
				colMin[j] = x
				colArg[j] = i
			}
		}
	}
	for j := n - 1; j >= 0; j-- {
		if math.IsInf(colMin[j], 1) {
			return 0, fmt.Errorf("%w: column %d has no allowed cell", ErrInfeasible, j)
		}
		v[j] = colMin[j]
		i := colArg[j]
		matches[i]++
		if matches[i] == 1 {
			rowSol[i] = j
			colSol[j] = i
		} else if v[j] < v[rowSol[i]] {
			j1 := rowSol[i]
			rowSol[i] = j
			colSol[j] = i
			colSol[j1] = -1
		} else {
			colSol[j] = -1
		}
	}
	numFree := 0
	for i := 0; i < n; i++ {
		switch matches[i] {
		case 0:
			s.free[numFree] = i
			numFree++
		case 1:
			j1 := rowSol[i]
			row := c[i*n : (i+1)*n]
			min := math.Inf(1)
			for j, x := range row {
				if j != j1 && x-v[j] < min {
					min = x - v[j]
				}
			}
			if !math.IsInf(min, 1) {
				v[j1] -= min
			}
		default:
			// Row i is the minimum of several columns; it keeps the cheapest
			// and the others were left unassigned above.
		}
	}
	return numFree, nil
}

// augmentingRowReduction is JV's auction-like phase: each free row takes its
// cheapest column and lowers that column's price to its second-cheapest
// reduced cost, possibly evicting the previous owner, who continues at once.
// It returns the number of rows still free.
func (s *Dense) augmentingRowReduction(c []float64, n, m, numFree int) (int, error) {
	v, colSol, rowSol, free := s.v, s.colSol, s.rowSol, s.free
	prev := numFree
	numFree = 0
	// Float rounding can make rows evict each other forever; after this many
	// steps evicted rows wait for the augmentation phase instead.
	budget := 4*n + 16
	for k := 0; k < prev; {
		i := free[k]
		k++
		row := c[i*m : (i+1)*m]
		umin, usub := math.Inf(1), math.Inf(1)
		j1, j2 := -1, -1
		for j, x := range row {
			h := x - v[j]
			if h < usub {
				if h >= umin {
					usub, j2 = h, j
				} else {
					usub, j2 = umin, j1
					umin, j1 = h, j
				}
			}
		}
		if j1 < 0 {
			return 0, fmt.Errorf("%w: row %d has no allowed cell", ErrInfeasible, i)
		}
		i0 := colSol[j1]
		reduce := umin < usub && !math.IsInf(usub, 1)
		if reduce {
			v[j1] -= usub - umin
		} else if i0 >= 0 && j2 >= 0 && usub == umin {
			// Tie: prefer the other minimum column, which may be free.
			j1 = j2
			i0 = colSol[j1]
		}
		rowSol[i] = j1
		colSol[j1] = i
		if i0 >= 0 {
			rowSol[i0] = -1
			budget--
			if reduce && budget > 0 {
				k--
				free[k] = i0
			} else {
				free[numFree] = i0
				numFree++
			}
		}
	}
	return numFree, nil
}

// augment finds a shortest augmenting path from freeRow (Dijkstra over
// reduced costs, scanning columns in blocks of equal distance as JV do),
// updates prices of the scanned columns and flips the path.
func (s *Dense) augment(c []float64, m, freeRow int) error {
	v, d, pred, collist := s.v, s.d, s.pred, s.collist
	colSol, rowSol := s.colSol, s.rowSol
	row := c[freeRow*m : (freeRow+1)*m]
	for j, x := range row {
		d[j] = x - v[j]
		pred[j] = freeRow
		collist[j] = j
	}
	low, up, last := 0, 0, 0
	endOfPath := -1
	min := 0.0
	for endOfPath < 0 {
		if up == low {
			last = low - 1
			min = d[collist[up]]
			up++
			for k := up; k < m; k++ {
				j := collist[k]
				h := d[j]
				if h <= min {
					if h < min {
						up = low
						min = h
					}
					collist[k] = collist[up]
					collist[up] = j
					up++
				}
			}
			if math.IsInf(min, 1) {
				return fmt.Errorf("%w: row %d cannot be assigned", ErrInfeasible, freeRow)
			}
			for k := low; k < up; k++ {
				if colSol[collist[k]] < 0 {
					endOfPath = collist[k]
					break
				}
			}
			if endOfPath >= 0 {
				break
			}
		}
		j1 := collist[low]
		low++
		i := colSol[j1]
		ri := c[i*m : (i+1)*m]
		h := ri[j1] - v[j1] - min
		for k := up; k < m; k++ {
			j := collist[k]
			v2 := ri[j] - v[j] - h
			if v2 < d[j] {
				pred[j] = i
				if v2 == min {
					if colSol[j] < 0 {
						endOfPath = j
						break
					}
					collist[k] = collist[up]
					collist[up] = j
					up++
				}
				d[j] = v2
			}
		}
	}
	for k := 0; k <= last; k++ {
		j := collist[k]
		v[j] += d[j] - min
	}
	for {
		i := pred[endOfPath]
		colSol[endOfPath] = i
		j := endOfPath
		endOfPath = rowSol[i]
		rowSol[i] = j
		if i == freeRow {
			break
		}
	}
	return nil
}

// MaxWeightMatching finds a maximum-weight matching in a rows×cols weight
// matrix: unlike Maximize, rows and columns may stay unmatched, cells of -Inf
// are forbidden, and cells of weight ≤ 0 are never used (they cannot add
// weight). RowCol[i] is -1 for an unmatched row; Total sums the used cells.
func (s *Dense) MaxWeightMatching(weight []float64, rows, cols int) (Result, error) {
	if rows < 0 || cols < 0 || len(weight) != rows*cols {
		return Result{}, fmt.Errorf("%w: %d values for a %d×%d matrix", ErrBadInput, len(weight), rows, cols)
	}
	// Clamping to zero turns "may stay unmatched" into a full assignment
	// whose zero cells are dropped afterwards: any matching extends to an
	// assignment of the same clamped weight, and back.
	clamped := make([]float64, len(weight))
	for k, x := range weight {
		if math.IsNaN(x) || math.IsInf(x, 1) {
			return Result{}, fmt.Errorf("%w: cell (%d,%d) is %v", ErrBadInput, k/cols, k%cols, x)
		}
		if x > 0 {
			clamped[k] = x
		}
	}
	r, err := s.Maximize(clamped, rows, cols)
	if err != nil {
		return Result{}, err
	}
	r.Total = 0
	for i, j := range r.RowCol {
		if j >= 0 && clamped[i*cols+j] <= 0 {
			r.RowCol[i] = -1
			continue
		}
		if j >= 0 {
			r.Total += weight[i*cols+j]
		}
	}
	return r, nil
}
