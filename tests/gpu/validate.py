#!/usr/bin/env python3
"""The GPU validation, in one go, on the GPU machine: CUDA and PyTorch in nvc containers,
checked against the host and timed against bare metal; hook-only device access; container
start time. Writes a Markdown report.

Run tests/gpu/prepare.sh first on a machine with network access (it gathers the release
binaries, runc, libseccomp and busybox into .device-carry/), then here, as root:

    python3 tests/gpu/validate.py --out DIR [--reps 5] [--starts 20]

The report is DIR/gpu-validation.md (copy it to docs/gpu-validation.md).
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CARRY = REPO / ".device-carry"
BIN = CARRY / "bin"
HERE = Path(__file__).resolve().parent
VENV_PY = "/opt/torch/.venv/bin/python3"
NVCC = "/usr/local/cuda/bin/nvcc"


def sh(cmd, timeout=600, **kw):
    """Runs a command; returns (returncode, stdout+stderr, seconds)."""
    t = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout, **kw)
    return p.returncode, p.stdout, time.perf_counter() - t


class Report:
    def __init__(self):
        self.checks = []  # (name, ok, command, output)
        self.sections = []

    def check(self, name, ok, command, output):
        self.checks.append((name, bool(ok), command, output.strip()))
        print(("PASS " if ok else "FAIL ") + name, flush=True)
        if not ok:
            print(output.strip()[-3000:], flush=True)

    def failed(self):
        return [c for c in self.checks if not c[1]]


def install_runc():
    shutil.copy2(CARRY / "runc/usr/sbin/runc", "/usr/local/sbin/runc")
    for lib in (CARRY / "runc/usr/lib/x86_64-linux-gnu").glob("libseccomp.so.2*"):
        dst = Path("/usr/local/lib") / lib.name
        if lib.is_symlink():
            if dst.exists() or dst.is_symlink():
                dst.unlink()
            dst.symlink_to(os.readlink(lib))
        else:
            shutil.copy2(lib, dst)
    subprocess.run(["ldconfig"], check=True)


def deps_of(binary):
    """The shared libraries a dynamically linked program loads, from ldd."""
    rc, out, _ = sh(["ldd", str(binary)])
    libs = []
    for line in out.splitlines():
        parts = line.split("=>")
        path = (parts[1] if len(parts) > 1 else parts[0]).split("(")[0].strip()
        if path.startswith("/"):
            libs.append(path)
    return libs


def minimal_rootfs(work, programs):
    """busybox + this machine's glibc + a static ldconfig + `programs`; no NVIDIA file."""
    root = work / "minimal"
    for d in ["bin", "sbin", "etc", "dev", "proc", "sys", "tmp", "run", "lib64",
              "usr/lib/x86_64-linux-gnu", "usr/bin"]:
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(CARRY / "runc/bin/busybox", root / "bin/busybox")
    for applet in ["sh", "ls", "cat", "echo", "grep", "head", "wc", "test", "stat", "mknod",
                   "true", "find", "sed"]:
        (root / "bin" / applet).symlink_to("busybox")
    # The glibc pieces the driver's libraries and nvidia-smi load.
    needed = {f"/lib/x86_64-linux-gnu/{l}" for l in ("libc.so.6", "libdl.so.2", "libpthread.so.0",
                                                     "libm.so.6", "librt.so.1", "libgcc_s.so.1")
              if os.path.exists(f"/lib/x86_64-linux-gnu/{l}")}
    needed.add("/lib64/ld-linux-x86-64.so.2")
    for prog in programs:
        shutil.copy2(prog, root / "usr/bin" / Path(prog).name)
        needed.update(deps_of(prog))
    for lib in needed:
        name = Path(lib).name
        if "nvidia" in name or name.startswith("libcuda"):
            raise SystemExit(f"{prog} links the driver ({lib}): build it with -cudart static")
        if name.startswith("ld-linux"):
            shutil.copy2(os.path.realpath(lib), root / "lib64" / name)
        else:
            shutil.copy2(os.path.realpath(lib), root / "usr/lib/x86_64-linux-gnu" / name)
    ldc = "/sbin/ldconfig.real" if os.path.exists("/sbin/ldconfig.real") else "/sbin/ldconfig"
    shutil.copy2(ldc, root / "sbin/ldconfig")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/ld.so.conf").write_text("/usr/lib/x86_64-linux-gnu\n")
    subprocess.run(["ldconfig", "-r", str(root)], check=True)
    return root


def framework_rootfs(work):
    """This machine's own userland (Python, PyTorch) without the driver: an overlay whose
    lower layer is the root file system. The driver's separate mount at /usr/local/nvidia
    and the devtmpfs at /dev are other mounts, so they are left out."""
    # The writable layer lives on a tmpfs: overlayfs refuses an upper layer inside its
    # lower one.
    layer = work / "fw-layer"
    layer.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8g", "fw-layer", str(layer)], check=True)
    upper, wd, root = layer / "upper", layer / "work", work / "fw-root"
    for d in (upper, wd, root):
        d.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir=/,upperdir={upper},workdir={wd}", str(root)], check=True)
    # Python and torch must come along even when they sit on their own mounts.
    for path in ["/opt", "/opt/torch", "/home", "/usr/local"]:
        rc, target, _ = sh(["findmnt", "-n", "-o", "TARGET", "--target", path])
        if rc == 0 and target.strip() == path and path != "/usr/local":
            (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--rbind", "-o", "ro", path, str(root / path.lstrip("/"))],
                           check=True)
    (root / "nvc-gpu").mkdir(exist_ok=True)
    shutil.copy2(HERE / "workload.py", root / "nvc-gpu/workload.py")
    return root


def bundle(work, name, rootfs, args, env=(), mknod=False, hook=None, readonly=False, copy=True):
    """A bundle running `args`. With `copy`, on its own copy of `rootfs`, as engines give
    each container a fresh writable layer: mount points one container leaves in a shared
    rootfs would show in the next."""
    d = work / "bundles" / name
    d.mkdir(parents=True, exist_ok=True)
    if copy:
        subprocess.run(["cp", "-a", str(rootfs), str(d / "rootfs")], check=True)
        rootfs = d / "rootfs"
    subprocess.run(["runc", "spec"], cwd=d, check=True)
    c = json.loads((d / "config.json").read_text())
    c["process"]["terminal"] = False
    c["process"]["args"] = list(args)
    c["process"]["env"] += list(env) + ["HOME=/root", "PYTHONUNBUFFERED=1"]
    c["root"] = {"path": str(rootfs), "readonly": readonly}
    if mknod:
        for k in ("bounding", "effective", "permitted"):
            c["process"]["capabilities"][k].append("CAP_MKNOD")
    if hook:
        c.setdefault("hooks", {})["prestart"] = [hook]
    (d / "config.json").write_text(json.dumps(c, indent=1))
    return d


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/nvc-validate-out")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--starts", type=int, default=20)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nvc-validate."))
    rep = Report()
    t0 = time.perf_counter()

    install_runc()
    config = work / "config.toml"
    config.write_text(f'[hook]\npath = "{BIN}/nvc-hook"\n[runtime]\nruntimes = ["/usr/local/sbin/runc"]\n'
                      f'[log]\nfile = "{out}/nvc.log"\nlevel = "info"\n')
    env = dict(os.environ, NVC_CONFIG=str(config))
    n = [0]

    def run(rt, bdir, timeout=300):
        n[0] += 1
        cid = f"v{n[0]}"
        cmd = ([str(BIN / "nvc-runtime")] if rt == "nvc" else ["runc"]) + \
            ["--root", str(work / "state"), "run", cid]
        return sh(cmd, timeout=timeout, cwd=bdir, env=env)

    # Facts about the host.
    _, host_l, _ = sh(["nvidia-smi", "-L"])
    _, q, _ = sh(["nvidia-smi", "--query-gpu=name,driver_version,persistence_mode", "--format=csv,noheader"])
    gpu_name, driver, persistence = [s.strip() for s in q.splitlines()[0].split(",")]
    _, kernel, _ = sh(["uname", "-r"])
    _, runc_v, _ = sh(["runc", "--version"])
    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": gpu_name, "driver": driver, "persistence mode": persistence,
        "kernel": kernel.strip(), "runc": runc_v.splitlines()[0],
        "cgroup": "v2" if sh(["stat", "-fc", "%T", "/sys/fs/cgroup"])[1].strip() == "cgroup2fs" else "v1",
    }
    _, nvc_info, _ = sh([str(BIN / "nvc"), "info"], env=env)

    # The CUDA program, built here with nvcc against the static CUDA runtime.
    vadd = work / "vadd"
    rc, o, _ = sh([NVCC, "-O2", "-cudart", "static", "-o", str(vadd), str(HERE / "vadd.cu")])
    rep.check("nvcc builds the CUDA program (static cudart)", rc == 0, "nvcc -cudart static vadd.cu", o)
    minimal = minimal_rootfs(work, [vadd] if rc == 0 else [])
    rc, o, _ = sh(["sh", "-c", f"find {minimal} -name '*nvidia*' -o -name 'libcuda*'"])
    rep.check("the minimal rootfs has no NVIDIA file", o.strip() == "", "find rootfs -name '*nvidia*' -o -name 'libcuda*'", o or "(none)")

    # Driver files and GPUs inside vs the host.
    b = bundle(work, "all", minimal, ["sh", "-c", "nvidia-smi -L; ldconfig -p | grep -E 'libcuda.so.1|libnvidia-ml.so.1'; ls /proc/driver/nvidia/gpus"],
               ["NVIDIA_VISIBLE_DEVICES=all"])
    rc, o, _ = run("nvc", b)
    inside_l = "\n".join(l for l in o.splitlines() if l.startswith("GPU "))
    rep.check("nvidia-smi -L inside equals the host's", rc == 0 and inside_l.strip() == host_l.strip(),
              "NVIDIA_VISIBLE_DEVICES=all: nvidia-smi -L", f"host:\n{host_l}\ncontainer:\n{o}")
    rep.check("ldconfig -p inside lists libcuda.so.1", "libcuda.so.1 (libc6,x86-64)" in o,
              "ldconfig -p | grep libcuda.so.1", o)
    b = bundle(work, "none", minimal, ["sh", "-c", "nvidia-smi -L; ls /dev/nvidia0; ls /proc/driver/nvidia/gpus | wc -l"],
               ["NVIDIA_VISIBLE_DEVICES=none"])
    rc, o, _ = run("nvc", b)
    rep.check("NVIDIA_VISIBLE_DEVICES=none gives no GPU", "No devices found" in o and "No such file" in o
              and o.strip().endswith("0"), "NVIDIA_VISIBLE_DEVICES=none: nvidia-smi -L; ls /dev/nvidia0", o)
    b = bundle(work, "void", minimal, ["sh", "-c", "ls /dev/nvidia* /usr/lib/x86_64-linux-gnu/*nvidia* /usr/lib/x86_64-linux-gnu/libcuda* /usr/bin/nvidia-smi 2>/dev/null; true"],
               ["NVIDIA_VISIBLE_DEVICES=void"])
    rc, o, _ = run("nvc", b)
    rep.check("NVIDIA_VISIBLE_DEVICES=void leaves the container without driver files", rc == 0 and o.strip() == "",
              "NVIDIA_VISIBLE_DEVICES=void: ls /dev/nvidia* …/libcuda* /usr/bin/nvidia-smi", o or "(nothing)")

    # The CUDA kernel.
    b = bundle(work, "vadd", minimal, ["/usr/bin/vadd"], ["NVIDIA_VISIBLE_DEVICES=all"])
    rc, o, _ = run("nvc", b)
    rep.check("the CUDA kernels' results are correct inside the container", rc == 0 and "result=OK" in o,
              "NVIDIA_VISIBLE_DEVICES=all: vadd", o)
    b = bundle(work, "vadd-runc", minimal, ["/usr/bin/vadd"])
    rc, o, _ = run("runc", b)
    rep.check("through plain runc the same program finds no GPU", rc != 0, "plain runc: vadd", o)

    # The framework image.
    fw = framework_rootfs(work)
    b = bundle(work, "fw-runc", fw, [VENV_PY, "/nvc-gpu/workload.py", "info"], copy=False)
    rc, o, _ = run("runc", b)
    seen = json.loads(o.strip().splitlines()[-1]) if rc == 0 and o.strip() else {}
    rep.check("through plain runc torch sees no GPU", rc == 0 and seen.get("available") is False,
              "plain runc: torch.cuda.is_available()", o)
    b = bundle(work, "fw-info", fw, [VENV_PY, "/nvc-gpu/workload.py", "info"], ["NVIDIA_VISIBLE_DEVICES=all"], copy=False)
    rc, o, _ = run("nvc", b)
    seen = json.loads(o.strip().splitlines()[-1]) if rc == 0 and o.strip() else {}
    rep.check("through nvc torch sees the GPU, with the host's name", seen.get("available") is True
              and seen.get("name") == gpu_name, "NVIDIA_VISIBLE_DEVICES=all: torch.cuda", o)

    # Speed: the same workload in the container and on bare metal, alternating.
    bench_b = bundle(work, "fw-bench", fw, [VENV_PY, "/nvc-gpu/workload.py", "bench"], ["NVIDIA_VISIBLE_DEVICES=all"], copy=False)
    rows = []
    for r in range(args.reps):
        pair = {}
        for where in (["bare", "container"] if r % 2 == 0 else ["container", "bare"]):
            if where == "bare":
                rc, o, _ = sh([VENV_PY, str(HERE / "workload.py"), "bench"])
            else:
                rc, o, _ = run("nvc", bench_b)
            try:
                pair[where] = json.loads(o.strip().splitlines()[-1])
            except (ValueError, IndexError):
                rep.check(f"bench run {r} {where}", False, "workload.py bench", o)
        if len(pair) == 2:
            rows.append(pair)
    ratios = {k: [p["container"][k] / p["bare"][k] for p in rows] for k in ("matmul_ms", "lstm_step_ms")}
    rep.check("the workload ran in every repetition", len(rows) == args.reps, "workload.py bench", f"{len(rows)} of {args.reps}")

    # Hook-only mode: the hook without the shim's spec edits, as Docker --gpus runs it.
    hook = {"path": str(BIN / "nvc-hook"), "args": ["nvidia-container-runtime-hook", "prestart"],
            "env": [f"NVC_CONFIG={config}"]}
    probe = "head -c 0 {0} 2>&1 && echo {1}=opened || echo {1}=refused"
    b = bundle(work, "hook-only", minimal, ["sh", "-c", probe.format("/dev/nvidia0", "given") + "; mknod /tmp/other c 195 1; " + probe.format("/tmp/other", "other")],
               ["NVIDIA_VISIBLE_DEVICES=0"], mknod=True, hook=hook)
    rc, o, _ = run("runc", b)
    rep.check("hook-only: the container can open the GPU it was given", "given=opened" in o,
              "plain runc + nvc-hook in the spec, NVIDIA_VISIBLE_DEVICES=0: open /dev/nvidia0", o)
    rep.check("hook-only: a node made with CAP_MKNOD for another GPU is refused (EPERM)",
              "other=refused" in o and "Operation not permitted" in o, "mknod /tmp/other c 195 1; open it", o)
    b = bundle(work, "shim-mknod", minimal, ["sh", "-c", probe.format("/dev/nvidia0", "given") + "; mknod /tmp/other c 195 1; " + probe.format("/tmp/other", "other")],
               ["NVIDIA_VISIBLE_DEVICES=0"], mknod=True)
    rc, o, _ = run("nvc", b)
    rep.check("through nvc-runtime: the given GPU opens, a CAP_MKNOD node for another is refused (EPERM)",
              "given=opened" in o and "other=refused" in o and "Operation not permitted" in o,
              "nvc-runtime, NVIDIA_VISIBLE_DEVICES=0, CAP_MKNOD", o)

    # Start time: same rootfs, /bin/true, alternating.
    plain = bundle(work, "start-plain", minimal, ["/bin/true"])
    nogpu = bundle(work, "start-nogpu", minimal, ["/bin/true"])
    allgpu = bundle(work, "start-all", minimal, ["/bin/true"], ["NVIDIA_VISIBLE_DEVICES=all"])
    starts = {"runc": [], "nvc, no GPU": [], "nvc, all GPUs": []}
    for _ in range(args.starts):
        for name, rt, bd in (("runc", "runc", plain), ("nvc, no GPU", "nvc", nogpu), ("nvc, all GPUs", "nvc", allgpu)):
            rc, o, secs = run(rt, bd)
            if rc == 0:
                starts[name].append(secs * 1000)
    rep.check("every timed start succeeded", all(len(v) == args.starts for v in starts.values()),
              "/bin/true starts", json.dumps({k: len(v) for k, v in starts.items()}))

    # The report.
    md = ["# GPU validation", "",
          "Generated by `tests/gpu/validate.py` on the GPU machine; do not edit by hand.", "",
          "| | |", "| --- | --- |"] + [f"| {k} | {v} |" for k, v in facts.items()] + \
         ["", "```", "$ nvc info", nvc_info.strip(), "```", "", "## Checks", "",
          "| check | result |", "| --- | --- |"] + \
         [f"| {name} | {'PASS' if ok else 'FAIL'} |" for name, ok, _, _ in rep.checks] + ["", "## Speed: container / bare metal", "",
          f"The same `workload.py bench` run inside an nvc container (the framework image, `NVIDIA_VISIBLE_DEVICES=all`) and on bare metal, alternating, {len(rows)} repetitions. "
          + (rows[0]["bare"].get("method", "") if rows else ""), "",
          "| metric | bare metal (median) | container (median) | ratio container/bare: median | min | max |",
          "| --- | --- | --- | --- | --- | --- |"]
    for k, label in (("matmul_ms", "bf16 matmul, ms"), ("lstm_step_ms", "LSTM train step, ms")):
        if rows:
            md.append(f"| {label} | {median([p['bare'][k] for p in rows]):.3f} | {median([p['container'][k] for p in rows]):.3f} | "
                      f"{median(ratios[k]):.4f} | {min(ratios[k]):.4f} | {max(ratios[k]):.4f} |")
    if rows:
        md.append(f"\nbf16 matmul throughput: {median([p['bare']['matmul_tflops'] for p in rows]):.0f} TFLOP/s bare, "
                  f"{median([p['container']['matmul_tflops'] for p in rows]):.0f} TFLOP/s in the container.")
    md += ["", "## Container start time", "",
           f"`runc run` of `/bin/true` in the minimal rootfs, start to exit, {args.starts} runs each, alternated.", "",
           "| runtime | median ms | min | max | added vs runc (median) |", "| --- | --- | --- | --- | --- |"]
    base = median(starts["runc"])
    for name, v in starts.items():
        if v:
            md.append(f"| {name} | {median(v):.1f} | {min(v):.1f} | {max(v):.1f} | {median(v) - base:+.1f} |")
    md += ["", "## Outputs", ""]
    for name, ok, cmd, output in rep.checks:
        md += [f"### {'PASS' if ok else 'FAIL'}: {name}", "", f"`{cmd}`", "", "```", output[-2500:] or "(no output)", "```", ""]
    md.append(f"Whole run: {time.perf_counter() - t0:.0f} s.")
    (out / "gpu-validation.md").write_text("\n".join(md) + "\n")
    subprocess.run(["umount", "-R", str(work / "fw-root")])
    subprocess.run(["umount", str(work / "fw-layer")])
    print(f"report: {out / 'gpu-validation.md'}; {len(rep.failed())} failed", flush=True)
    return 1 if rep.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
