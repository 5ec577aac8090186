"""GPU workloads run both inside an nvc container and on bare metal.

python workload.py info   -> one JSON line: what torch sees
python workload.py bench  -> one JSON line: bf16 matmul and LSTM-classifier step times
"""
import json
import sys
import time


def info():
    import torch

    out = {"torch": torch.__version__, "available": torch.cuda.is_available()}
    if out["available"]:
        out.update(
            count=torch.cuda.device_count(),
            name=torch.cuda.get_device_name(0),
            capability=".".join(map(str, torch.cuda.get_device_capability(0))),
            cudnn=torch.backends.cudnn.version(),
        )
    print(json.dumps(out))


def timed(fn, warmup, iters):
    """Per-iteration milliseconds, measured with CUDA events after warm-up."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def bench():
    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    dev = torch.device("cuda")
    torch.backends.cudnn.enabled = True

    n = 8192
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    mm = timed(lambda: torch.matmul(a, b), warmup=100, iters=300)
    mm_ms = median(mm)

    # Sized so that the GPU, not the launching CPU, sets the step time: with a small
    # batch the step is a stream of tiny kernels and moves with whatever else the host's
    # CPUs are doing (11 to 17 ms between repetitions of one run), which hides a 2% bound.
    shape = dict(vocab=20000, emb=512, hidden=1024, layers=2, batch=512, seq=128, classes=10)

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(shape["vocab"], shape["emb"])
            self.lstm = nn.LSTM(shape["emb"], shape["hidden"], num_layers=shape["layers"], batch_first=True)
            self.head = nn.Linear(shape["hidden"], shape["classes"])

        def forward(self, x):
            out, _ = self.lstm(self.emb(x))
            return self.head(out[:, -1])

    model = Classifier().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randint(0, shape["vocab"], (shape["batch"], shape["seq"]), device=dev)
    y = torch.randint(0, shape["classes"], (shape["batch"],), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    lstm_warmup, lstm_iters = 10, 50
    lstm = timed(step, warmup=lstm_warmup, iters=lstm_iters)
    print(
        json.dumps(
            {
                "matmul_ms": mm_ms,
                "matmul_tflops": 2 * n**3 / (mm_ms / 1e3) / 1e12,
                "lstm_step_ms": median(lstm),
                "lstm_step_ms_min": min(lstm),
                "lstm_step_ms_max": max(lstm),
                "method": (
                    f"bf16 matmul {n}×{n}×{n}: median of 300 after 100 warm-up. LSTM classifier "
                    f"(embedding {shape['emb']}, {shape['layers']}-layer LSTM {shape['hidden']} with cuDNN, "
                    f"batch {shape['batch']} × {shape['seq']} tokens, Adam): median step of {lstm_iters} "
                    f"after {lstm_warmup} warm-up."
                ),
                "cudnn": torch.backends.cudnn.version(),
            }
        )
    )


if __name__ == "__main__":
    {"info": info, "bench": bench}[sys.argv[1]]()
