"""PyTorch probe for tests/gpu/check.sh: runs one measurement under whatever
LD_PRELOAD / XCUDA_CONTROL_BLOCK the caller set and prints one JSON line.

  torch_probe.py oom CHUNK_MIB        allocate CHUNK_MIB tensors until OOM
  torch_probe.py matmul SECONDS N     bf16 N×N matmuls for SECONDS, report rate
  torch_probe.py online RATE SECONDS N K
                                      an online service: Poisson requests at
                                      RATE/s for SECONDS, each K bf16 N×N
                                      matmuls then a synchronise; latency runs
                                      from the request's arrival (queueing
                                      included), p50/p99 reported
"""
import json
import sys
import time


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print(json.dumps({"error": "torch.cuda.is_available() is False"}))
        return 1
    mode = sys.argv[1]
    dev = torch.device("cuda:0")
    if mode == "oom":
        chunk = int(sys.argv[2]) << 20
        held, err = [], ""
        try:
            while len(held) < 100000:
                held.append(torch.empty(chunk, dtype=torch.uint8, device=dev))
        except torch.cuda.OutOfMemoryError as e:  # what a capped job must see
            err = "OutOfMemoryError: " + str(e).splitlines()[0][:160]
        except RuntimeError as e:
            err = "RuntimeError: " + str(e).splitlines()[0][:160]
        free, total = torch.cuda.mem_get_info(dev)
        print(json.dumps({
            "allocated_bytes": len(held) * chunk,
            "reserved_bytes": torch.cuda.memory_reserved(dev),
            "error": err,
            "mem_get_info_free": free,
            "mem_get_info_total": total,
        }))
        return 0
    if mode == "matmul":
        secs, n = float(sys.argv[2]), int(sys.argv[3])
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        for _ in range(5):
            a @ b
        torch.cuda.synchronize()
        iters, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < secs:
            for _ in range(10):
                a @ b
            torch.cuda.synchronize()
            iters += 10
        dt = time.perf_counter() - t0
        print(json.dumps({"iters": iters, "seconds": dt, "iters_per_s": iters / dt,
                          "tflops": 2 * n ** 3 * iters / dt / 1e12}))
        return 0
    if mode == "online":
        import random
        rate, secs, n, k = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        t0 = time.perf_counter()
        for _ in range(20):
            for _ in range(k):
                a @ b
            torch.cuda.synchronize()
        service_ms = (time.perf_counter() - t0) / 20 * 1e3
        rng = random.Random(1)  # the same arrivals in every run
        start = arrival = time.perf_counter()
        lat = []
        while True:
            arrival += rng.expovariate(rate)
            if arrival - start > secs:
                break
            wait = arrival - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            for _ in range(k):
                a @ b
            torch.cuda.synchronize()
            lat.append(time.perf_counter() - arrival)
        lat.sort()
        q = lambda f: round(lat[min(len(lat) - 1, int(f * len(lat)))] * 1e3, 3)
        print(json.dumps({"requests": len(lat), "service_alone_warmup_ms": round(service_ms, 3),
                          "p50_ms": q(0.50), "p99_ms": q(0.99),
                          "mean_ms": round(sum(lat) / len(lat) * 1e3, 3)}))
        return 0
    print(json.dumps({"error": "unknown mode " + mode}))
    return 2


if __name__ == "__main__":
    sys.exit(main())
