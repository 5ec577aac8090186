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

    class Classifier(nn.Module):
        def __init__(self, vocab=20000, emb=256, hidden=512, classes=10):
            super().__init__()
            self.emb = nn.Embedding(vocab, emb)
            self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True)
            self.head = nn.Linear(hidden, classes)

        def forward(self, x):
            out, _ = self.lstm(self.emb(x))
            return self.head(out[:, -1])

    model = Classifier().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randint(0, 20000, (64, 128), device=dev)
    y = torch.randint(0, 10, (64,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    lstm = timed(step, warmup=20, iters=100)
    print(
        json.dumps(
            {
                "matmul_ms": mm_ms,
                "matmul_tflops": 2 * n**3 / (mm_ms / 1e3) / 1e12,
                "lstm_step_ms": median(lstm),
                "lstm_step_ms_min": min(lstm),
                "lstm_step_ms_max": max(lstm),
                "cudnn": torch.backends.cudnn.version(),
            }
        )
    )


if __name__ == "__main__":
    {"info": info, "bench": bench}[sys.argv[1]]()
