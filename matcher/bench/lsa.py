"""Times scipy.optimize.linear_sum_assignment on matrices written by the Go
comparison (matcher/bench/scipycompare): each argument is a file of
little-endian float64 values with an 16-byte header (rows, cols as int64).
Prints one JSON line per file: the optimum (maximised) and the wall and CPU
seconds taken by the solver call alone (loading excluded)."""
import json
import sys
import time

import numpy as np
from scipy.optimize import linear_sum_assignment


def main():
    for path in sys.argv[1:]:
        raw = np.fromfile(path, dtype="<f8")
        rows, cols = int(raw[:2].view("<i8")[0]), int(raw[:2].view("<i8")[1])
        w = raw[2:].reshape(rows, cols)
        t0, c0 = time.perf_counter(), time.process_time()
        r, c = linear_sum_assignment(w, maximize=True)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        print(json.dumps({"file": path, "rows": rows, "cols": cols,
                          "total": float(w[r, c].sum()), "seconds": dt,
                          "cpu_seconds": dc}), flush=True)


if __name__ == "__main__":
    main()
