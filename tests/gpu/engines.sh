#!/usr/bin/env bash
# GPU containers started by real engines on the GPU machine's real driver: Debian 13's
# Docker (dockerd with its containerd and runc, nvc registered by `nvc runtime configure`)
# and Podman (nvc's hooks.d file and the CDI spec `nvc cdi generate` writes here). Images:
# a small glibc rootfs with a CUDA program built here with nvcc, and one with this
# machine's PyTorch venv (the files a bf16 matmul and an LSTM step load). Checks
# nvidia-smi, the CUDA results, NVIDIA_VISIBLE_DEVICES none and void, one GPU by UUID,
# PyTorch container against bare metal, and times `docker run` with and without nvc.
# Then containerd 1.7 (the one Docker 26 ships with) through its CRI plugin, driven as the
# kubelet drives it by nvc-cri (the test kit's CRI client): the RuntimeClass handler `nv`
# and each way NVIDIA's device plugin hands a pod its GPUs.
# Needs .device-carry/ from tests/gpu/prepare.sh: engines/engines.tar.xz and, when bin/
# and runc/ are not carried beside it (the 64 MiB a call carries), engines/support.tar.xz.
# Usage: tests/gpu/engines.sh [OUT_DIR]   (writes OUT_DIR/engines.md; with
# NVC_ENGINES_DOC=docs/gpu-validation.md its "Engines" section is replaced by it)
# NVC_ENGINES_STARTS (20), NVC_ENGINES_REPS (5), NVC_ENGINES_TORCH=0 skips PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
carry=$PWD/.device-carry
out=$(mkdir -p "${1:-/tmp/nvc-engines}" && cd "${1:-/tmp/nvc-engines}" && pwd)
work=$(mktemp -d /tmp/nvc-engines.XXXXXX)
starts=${NVC_ENGINES_STARTS:-20}
reps=${NVC_ENGINES_REPS:-5}
t0=$(date +%s)

# nvc's binaries, runc and the commit, packed beside the engines to fit one call's carry.
if [ -s "$carry/engines/support.tar.xz" ] && [ ! -x "$carry/bin/nvc-cri" ]; then
    xz -dc "$carry/engines/support.tar.xz" | tar -C "$carry" -xf - || { echo "FAIL unpack engines/support.tar.xz"; exit 1; }
fi
. tests/gpu/common.sh
md=$out/engines.md
: >"$md"
results=$work/results
: >"$results"
# check() as in common.sh, also kept for the markdown report.
check() { # check NAME CONDITION-COMMAND...
    local name=$1; shift
    if "$@"; then echo "PASS $name"; echo "PASS|$name" >>"$results"
    else echo "FAIL $name"; echo "FAIL|$name" >>"$results"; fail=1; fi
}
section() { echo; echo "=== $* ($(($(date +%s) - t0)) s)"; }

# --- The engines: unpacked here, with the libraries this machine lacks.
eng=$work/eng
mkdir -p "$eng" && xz -dc "$carry/engines/engines.tar.xz" | tar -C "$eng" -xf - || { echo "FAIL unpack the engines"; exit 1; }
mkdir -p /usr/local/lib/nvc-engines
added=()
for lib in "$eng"/lib/*.so*; do
    name=$(basename "$lib")
    if ! ldconfig -p | grep -q "^[[:space:]]$name "; then cp "$lib" /usr/local/lib/nvc-engines/; added+=("$name"); fi
done
echo /usr/local/lib/nvc-engines >/etc/ld.so.conf.d/zz-nvc-engines.conf && ldconfig
echo "libraries added from the engines' packages: ${added[*]:-none}"
mkdir -p /usr/local/libexec/podman && cp "$eng/bin/netavark" /usr/local/libexec/podman/
export PATH=$eng/bin:$PATH
sed -n 's/_amd64.deb$//p' "$eng/packages" | grep -E '^(docker|containerd|podman|conmon|netavark)' | sed 's/^/package: /'

host_l=$(nvidia-smi -L)
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
read -r gpu_name driver < <(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 | awk -F', ' '{gsub(/ /,"_",$1); print $1, $2}')
gpu_name=${gpu_name//_/ }
echo "host: $host_l; driver $driver"

# --- The test image: common.sh's rootfs (busybox, glibc, a static ldconfig) and the CUDA
# program with the libraries it links (the CUDA runtime statically).
section "images"
img=$work/img
cp -a "$rootfs" "$img" && mkdir -p "$img/usr/bin" && ln -s busybox "$img/bin/true"
if /usr/local/cuda/bin/nvcc -O2 -cudart static -gencode arch=compute_90,code=sm_90 \
    -gencode arch=compute_90,code=compute_90 -o "$img/usr/bin/vadd" tests/gpu/vadd.cu; then
    for lib in $(ldd "$img/usr/bin/vadd" | awk '/=> \// {print $3}'); do
        [ -e "$img/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ] || cp -L "$lib" "$img/usr/lib/x86_64-linux-gnu/"
    done
    ldconfig -r "$img"
fi
check "nvcc builds the CUDA program (static cudart)" test -x "$img/usr/bin/vadd"
check "the test image has no NVIDIA file" test -z "$(find "$img" -name '*nvidia*' -o -name 'libcuda*')"
tar -C "$img" -cf "$work/img.tar" .

# The PyTorch image: this machine's venv and its Python, cut down to what a run of
# workload.py (info, then bench) loads: the top-level packages it imports, the
# libraries it maps (not the driver's), the standard library, a static ldconfig.
venv_py=/opt/torch/.venv/bin/python3
torch_ok=0
if [ "${NVC_ENGINES_TORCH:-1}" = 1 ] && [ -x "$venv_py" ]; then
    mkdir -p "$work/torch-extra/nvc-gpu" "$work/torch-extra/sbin" "$work/torch-extra/tmp" "$work/torch-extra/etc"
    cp tests/gpu/workload.py "$work/torch-extra/nvc-gpu/"
    ldc=/sbin/ldconfig.real; [ -x "$ldc" ] || ldc=/sbin/ldconfig
    cp -L "$ldc" "$work/torch-extra/sbin/ldconfig"
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$work/torch-extra/etc/passwd"
    echo "/usr/lib/x86_64-linux-gnu" >"$work/torch-extra/etc/ld.so.conf"
    tb=$(date +%s)
    "$venv_py" - "$repo/tests/gpu/workload.py" "$work/torch-extra" >"$work/torch-files" 2>"$work/torch-files.err" <<'PY'
import os, runpy, sys, sysconfig, io, contextlib
script, extra = sys.argv[1:3]
for mode in ("info", "bench"):
    sys.argv = [script, mode]
    with contextlib.redirect_stdout(io.StringIO()):
        runpy.run_path(script, run_name="__main__")
files = set()
site = [p for p in sys.path if p.endswith("site-packages")]
def under_site(path):
    for s in site:
        if path.startswith(s + "/"):
            return s, path[len(s) + 1:]
    return None, None
def add(path):
    if not path or not os.path.exists(path):
        return
    s, rel = under_site(path)
    if s:  # a whole top-level package (for nvidia/*, the wheel's own folder)
        parts = rel.split("/")
        keep = 2 if parts[0] in ("nvidia",) and len(parts) > 2 else 1
        files.add(os.path.join(s, *parts[:keep]))
    else:
        files.add(path)
for m in list(sys.modules.values()):
    add(getattr(m, "__file__", None))
for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) >= 6 and f[5].startswith("/"):
        name = os.path.basename(f[5])
        if "nvidia" in name and not under_site(f[5])[0] or name.startswith("libcuda.") or f[5].startswith(("/dev/", "/usr/local/nvidia")):
            continue
        add(f[5])
for s in site:
    for e in os.listdir(s):
        if e.endswith((".pth", ".dist-info")) or e.endswith(".py"):
            files.add(os.path.join(s, e))
    files.add(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(s))), "pyvenv.cfg"))
    binp = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(s))), "bin")
    for e in os.listdir(binp):
        if e.startswith("python"):
            files.add(os.path.join(binp, e))
# The merged-/usr links the loader and libraries are found through.
for l in ("lib", "lib64", "usr/lib64", "bin"):
    if os.path.islink("/" + l):
        files.add("/" + l)
files.add(os.path.join(os.path.realpath("/lib64"), "ld-linux-x86-64.so.2"))
exe = os.path.realpath(sys.executable)
files.add(exe)
stdlib = sysconfig.get_paths()["stdlib"]
files.add(stdlib)
# The links on the way to the interpreter.
p = sys.executable
while os.path.islink(p):
    t = os.readlink(p); p = t if t.startswith("/") else os.path.join(os.path.dirname(p), t); files.add(p)
# Libraries' soname links.
for f in list(files):
    if ".so" in f and os.path.isfile(f):
        d = os.path.dirname(f)
        for e in os.listdir(d):
            q = os.path.join(d, e)
            if os.path.islink(q) and os.path.realpath(q) == os.path.realpath(f):
                files.add(q)
# Every folder on the way, made ahead in the extra tree that goes first in the tar (an
# import makes no missing parent); a link on the way comes as the link.
for f in list(files):
    a = os.path.dirname(f)
    while a not in ("/", ""):
        if os.path.islink(a):
            files.add(a)
        else:
            os.makedirs(extra + a, exist_ok=True)
        a = os.path.dirname(a)
for f in sorted(files):
    print(f.lstrip("/"))
PY
    if [ -s "$work/torch-files" ]; then
        # The standard library without its tests.
        # Copied into one tree first, so that the tar has every folder before its files.
        mkdir -p "$work/torch-root"
        tar -C / -cf - --exclude='*/test' --exclude='*/tests' -T "$work/torch-files" 2>"$work/torch-tar.err" |
            tar -C "$work/torch-root" -xf - && cp -a "$work/torch-extra/." "$work/torch-root/" &&
            tar -C "$work/torch-root" -cf "$work/torch.tar" . && torch_ok=1
        rm -rf "$work/torch-root"
        cat "$work/torch-tar.err"
        [ $torch_ok = 1 ] && echo "PyTorch image: $(wc -l <"$work/torch-files") paths, $(du -h "$work/torch.tar" | cut -f1) tar, made in $(($(date +%s) - tb)) s"
    else
        cat "$work/torch-files.err"
    fi
    check "the PyTorch image is packed from this machine's venv" test $torch_ok = 1
    [ $torch_ok = 1 ] && check "the PyTorch image has no driver file" test -z "$(tar -tf "$work/torch.tar" | grep -E '(^|/)libcuda\.so|libnvidia-ml\.so|nvidia-smi$')"
fi

# --- Docker: its own dockerd, containerd and runc; nvc registered as a user would.
section "Docker"
d=$work/docker
mkdir -p "$d"/{data,exec,tmp,client,hook-bin}
echo '{}' >"$d/daemon.json"
"$carry/bin/nvc" runtime configure --runtime docker --config "$d/daemon.json" \
    --runtime-path "$carry/bin/nvc-runtime" --hook-path "$carry/bin/nvc-hook" \
    --gpus-alias --alias-dir "$d/hook-bin" --cdi
echo "\$ cat daemon.json"; cat "$d/daemon.json"; echo
# nvc's CDI spec for this driver where Docker and Podman read CDI specs.
mkdir -p /etc/cdi
"$carry/bin/nvc" cdi generate --output /etc/cdi/nvc.json && "$carry/bin/nvc" cdi list --spec /etc/cdi/nvc.json
docker() { DOCKER_CONFIG=$d/client timeout 300 "$eng/bin/docker" -H "unix://$d/docker.sock" "$@"; }
start_dockerd() { # start_dockerd STORAGE-DRIVER: waits up to 60 s for it to answer
    PATH=$d/hook-bin:$PATH TMPDIR=$d/tmp NVC_CONFIG=$NVC_CONFIG setsid "$eng/bin/dockerd" \
        --data-root "$d/data" --exec-root "$d/exec" --pidfile "$d/dockerd.pid" \
        --host "unix://$d/docker.sock" --config-file "$d/daemon.json" --storage-driver "$1" \
        --iptables=false --ip-masq=false --bridge=none --userland-proxy=false \
        --exec-opt native.cgroupdriver=cgroupfs >>"$d/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do
        docker version --format '{{.Server.Version}}' >/dev/null 2>&1 && return 0
        kill -0 $! 2>/dev/null || return 1
        sleep 1
    done
    return 1
}
docker_up=0
for driver_name in overlay2 vfs; do
    if start_dockerd $driver_name; then docker_up=1; break; fi
    echo "dockerd did not start with $driver_name:"; tail -5 "$d/dockerd.log"
    kill "$(cat "$d/dockerd.pid" 2>/dev/null)" 2>/dev/null; sleep 2
done
check "dockerd starts" test $docker_up = 1
docker_v="Docker $(docker version --format '{{.Server.Version}}'), $(docker info --format 'storage {{.Driver}}, {{.CgroupDriver}} cgroups v{{.CgroupVersion}}, runtimes {{range $k, $v := .Runtimes}}{{$k}} {{end}}')"
containerd_v=$("$eng/bin/containerd" --version | awk '{print $3}')
echo "$docker_v; containerd $containerd_v; runc $(runc --version | head -1 | awk '{print $3}')"
docker import "$work/img.tar" nvc-gpu-test >/dev/null
check "docker imports the test image" docker image inspect nvc-gpu-test -f ok
drun() { docker run --rm --network none "$@" 2>&1; }

gpu_checks() { # gpu_checks ENGINE RUN-FUNCTION LABEL OPTIONS...: nvidia-smi -L, nvidia-smi, vadd
    local engine=$1 run=$2 label=$3; shift 3
    local l full v
    l=$($run "$@" nvc-gpu-test nvidia-smi -L); echo "[$engine $label] nvidia-smi -L:"; echo "$l"
    check "$engine $label: nvidia-smi -L inside equals the host's" test "$(grep '^GPU ' <<<"$l")" = "$host_l"
    full=$($run "$@" nvc-gpu-test nvidia-smi)
    check "$engine $label: nvidia-smi works (driver $driver, $gpu_name)" \
        eval 'grep -q "Driver Version: $driver" <<<"$full" && grep -q "${gpu_name:0:18}" <<<"$full"'
    v=$($run "$@" nvc-gpu-test vadd); echo "[$engine $label] vadd: $v"
    check "$engine $label: the CUDA vector add and matmul are right" grep -q 'result=OK' <<<"$v"
}
none_void() { # none_void ENGINE RUN-FUNCTION OPTIONS...
    local engine=$1 run=$2; shift 2
    local none void
    none=$($run "$@" -e NVIDIA_VISIBLE_DEVICES=none nvc-gpu-test sh -c 'echo "gpus: $(ls /proc/driver/nvidia/gpus 2>/dev/null)"; ls /dev/nvidia0 2>&1; ls /usr/lib/x86_64-linux-gnu/libcuda.so.1')
    echo "[$engine none] $none"
    check "$engine NVIDIA_VISIBLE_DEVICES=none: no GPU, no /dev/nvidia0" eval 'grep -qx "gpus: " <<<"$none" && grep -q "No such file" <<<"$none"'
    check "$engine NVIDIA_VISIBLE_DEVICES=none: the driver libraries are there" grep -qx '/usr/lib/x86_64-linux-gnu/libcuda.so.1' <<<"$none"
    # (/proc/driver/nvidia is the host's in any container that nvc leaves alone.)
    void=$($run "$@" -e NVIDIA_VISIBLE_DEVICES=void nvc-gpu-test sh -c 'ls /dev/nvidia* /usr/lib/x86_64-linux-gnu/libcuda* /usr/bin/nvidia-smi 2>/dev/null; echo end')
    echo "[$engine void] $void"
    check "$engine NVIDIA_VISIBLE_DEVICES=void: no device, no driver library, no nvidia-smi" test "$void" = end
}

if [ $docker_up = 1 ]; then
    gpu_checks docker drun "--runtime=nv, NVIDIA_VISIBLE_DEVICES=all" --runtime=nv -e NVIDIA_VISIBLE_DEVICES=all
    gpu_checks docker drun "--gpus all" --gpus all
    gpu_checks docker drun "--gpus device=$uuid" --gpus "device=$uuid"
    gpu_checks docker drun "--runtime=nv, NVIDIA_VISIBLE_DEVICES=$uuid" --runtime=nv -e "NVIDIA_VISIBLE_DEVICES=$uuid"
    gpu_checks docker drun "--device nvidia.com/gpu=all (CDI)" --device nvidia.com/gpu=all
    none_void docker drun --runtime=nv
    plain=$(drun nvc-gpu-test sh -c 'vadd; ls /dev/nvidia* /usr/lib/x86_64-linux-gnu/libcuda* 2>&1'); echo "[docker, runc alone] $plain"
    check "docker without nvc: the same image finds no GPU and no driver" eval '! grep -q "result=OK" <<<"$plain" && ! grep -q "^/dev/nvidia0" <<<"$plain"'
    [ $torch_ok = 1 ] && { docker import "$work/torch.tar" nvc-torch >/dev/null; check "docker imports the PyTorch image" docker image inspect nvc-torch -f ok; }
fi

# --- Podman: its own storage, nvc's hooks.d file, nvc's CDI spec in /etc/cdi.
section "Podman"
p=$work/podman
mkdir -p "$p"/{root,runroot,tmp,hooks.d}
mkdir -p /etc/containers
[ -e /etc/containers/policy.json ] || echo '{"default":[{"type":"insecureAcceptAnything"}]}' >/etc/containers/policy.json
"$carry/bin/nvc" runtime configure --runtime podman --config "$p/hooks.d/oci-nvc-hook.json" --hook-path "$carry/bin/nvc-hook"
# The hook runs with the environment its file gives: NVC_CONFIG, as the test's config is
# not /etc/nvc/config.toml.
python3 - "$p/hooks.d/oci-nvc-hook.json" "$NVC_CONFIG" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["hook"].setdefault("env", []).append("NVC_CONFIG=" + sys.argv[2])
json.dump(j, open(sys.argv[1], "w"), indent=1)
PY
echo "\$ cat hooks.d/oci-nvc-hook.json"; cat "$p/hooks.d/oci-nvc-hook.json"; echo
# No journald or systemd here: logs and events to files.
printf '[containers]\nlog_driver = "k8s-file"\n[engine]\nevents_logger = "file"\ncgroup_manager = "cgroupfs"\n' >"$p/containers.conf"
podman() {
    CONTAINERS_CONF=$p/containers.conf TMPDIR=$p/tmp timeout 300 "$eng/bin/podman" --root "$p/root" --runroot "$p/runroot" --tmpdir "$p/tmp" \
        --storage-driver "${podman_storage:-overlay}" --cgroup-manager cgroupfs --events-backend file \
        --runtime /usr/local/sbin/runc --conmon "$eng/bin/conmon" --hooks-dir "$p/hooks.d" "$@"
}
podman_storage=overlay
podman_up=0
if podman import "$work/img.tar" nvc-gpu-test >"$p/import.log" 2>&1; then podman_up=1
else
    cat "$p/import.log"; podman_storage=vfs
    podman import "$work/img.tar" nvc-gpu-test >"$p/import.log" 2>&1 && podman_up=1 || cat "$p/import.log"
fi
check "podman imports the test image" test $podman_up = 1
podman_v="Podman $(podman version --format '{{.Client.Version}}' 2>&1), storage $podman_storage, conmon $("$eng/bin/conmon" --version | head -1 | awk '{print $3}')"
echo "$podman_v"
prun() { podman run --rm --network none "$@" 2>&1; }
if [ $podman_up = 1 ]; then
    gpu_checks podman prun "--device nvidia.com/gpu=all (CDI)" --device nvidia.com/gpu=all
    gpu_checks podman prun "--device nvidia.com/gpu=0 (CDI)" --device nvidia.com/gpu=0
    gpu_checks podman prun "--device nvidia.com/gpu=$uuid (CDI)" --device "nvidia.com/gpu=$uuid"
    gpu_checks podman prun "hooks.d, NVIDIA_VISIBLE_DEVICES=all" -e NVIDIA_VISIBLE_DEVICES=all
    gpu_checks podman prun "--gpus all" --gpus all
    none_void podman prun
    plain=$(prun nvc-gpu-test sh -c 'vadd; ls /dev/nvidia* /usr/lib/x86_64-linux-gnu/libcuda* 2>&1'); echo "[podman, no request] $plain"
    check "podman without a GPU request: no GPU and no driver" eval '! grep -q "result=OK" <<<"$plain" && ! grep -q "^/dev/nvidia0" <<<"$plain"'
    [ $torch_ok = 1 ] && { podman import "$work/torch.tar" nvc-torch >/dev/null 2>&1; check "podman imports the PyTorch image" podman image exists nvc-torch; }
fi

# --- containerd through its CRI plugin: a node as `nvc runtime configure --runtime
# containerd --cdi` leaves it (the RuntimeClass handler nv, CDI on, nvc's spec in
# /etc/cdi), pods run by nvc-cri as the kubelet runs them (RunPodSandbox with the
# handler, CreateContainer, StartContainer, the CRI log), host network, nothing pulled:
# the test image is imported into the k8s.io namespace, once more as the sandbox image.
section "containerd CRI"
c=$work/cri
mkdir -p "$c/pods"
cri_up=0
cri_v=
if [ -x "$carry/bin/nvc-cri" ] && [ -x "$eng/bin/ctr" ]; then
    "$carry/bin/nvc-cri" config "$c" 2 docker.io/library/nvc-pause:latest /etc/cdi >"$c/config.toml"
    "$carry/bin/nvc" runtime configure --runtime containerd --config "$c/config.toml" \
        --runtime-path "$carry/bin/nvc-runtime" --cdi
    echo "\$ cat conf.d/99-nvc.toml"; cat "$c/conf.d/99-nvc.toml"; echo
    # The device plugin's volume-mounts strategy needs the setting that accepts it.
    cp "$NVC_CONFIG" "$c/nvc.toml" && printf '\n[requests]\naccept-devices-as-volume-mounts = true\n' >>"$c/nvc.toml"
    NVC_CONFIG=$c/nvc.toml TMPDIR=$c setsid "$eng/bin/containerd" --config "$c/config.toml" >"$c/containerd.log" 2>&1 </dev/null &
    echo $! >"$c/containerd.pid"
    cctr() { timeout 300 "$eng/bin/ctr" --address "$c/containerd.sock" -n k8s.io "$@"; }
    for _ in $(seq 60); do cctr version >/dev/null 2>&1 && { cri_up=1; break; }; sleep 1; done
    check "containerd starts with the CRI plugin" test $cri_up = 1
    [ $cri_up = 1 ] || tail -20 "$c/containerd.log"
    if [ $cri_up = 1 ]; then
        cri_v="containerd $("$eng/bin/containerd" --version | awk '{print $3}'), CRI config version 2"
        "$carry/bin/nvc-cri" image "$work/img.tar" docker.io/library/nvc-gpu-test:latest "$c/img.oci.tar" -- sh &&
            "$carry/bin/nvc-cri" image "$work/img.tar" docker.io/library/nvc-pause:latest "$c/pause.oci.tar" -- busybox sleep 86400 &&
            cctr images import --snapshotter native "$c/img.oci.tar" >/dev/null &&
            cctr images import --snapshotter native "$c/pause.oci.tar" >/dev/null
        check "ctr imports the test and sandbox images into k8s.io" eval 'cctr images ls -q | grep -q nvc-gpu-test && cctr images ls -q | grep -q nvc-pause'
    fi
fi
cri() { # cri OPTIONS... nvc-gpu-test COMMAND...: a pod on handler nv (OPTIONS as nvc-cri run takes them)
    local opts=()
    while [ $# -gt 0 ] && [ "$1" != nvc-gpu-test ]; do opts+=("$1"); shift; done
    shift
    timeout 300 "$carry/bin/nvc-cri" run "$c/containerd.sock" docker.io/library/nvc-gpu-test:latest \
        --log-dir "$c/pods" "${opts[@]}" -- "$@" 2>&1
}
if [ $cri_up = 1 ]; then
    gpu_checks cri cri "envvar strategy, NVIDIA_VISIBLE_DEVICES=$uuid" -e "NVIDIA_VISIBLE_DEVICES=$uuid"
    gpu_checks cri cri "cdi-cri strategy, CDIDevice nvidia.com/gpu=$uuid" --cdi "nvidia.com/gpu=$uuid"
    gpu_checks cri cri "cdi-annotations strategy, nvidia.com/gpu=all" \
        --annotation "cdi.k8s.io/nvidia-device-plugin_e5a0f26b=nvidia.com/gpu=all"
    gpu_checks cri cri "volume-mounts strategy, /var/run/nvidia-container-devices/$uuid" \
        -e NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices --mount "/dev/null:/var/run/nvidia-container-devices/$uuid"
    none_void cri cri
    plain=$(cri nvc-gpu-test sh -c 'vadd; ls /dev/nvidia* /usr/lib/x86_64-linux-gnu/libcuda* 2>&1'); echo "[cri, no request] $plain"
    check "cri without a GPU request: no GPU and no driver" eval '! grep -q "result=OK" <<<"$plain" && ! grep -q "^/dev/nvidia0" <<<"$plain"'
    bad=$(cri -e NVIDIA_VISIBLE_DEVICES=7 nvc-gpu-test true); rc=$?; echo "[cri, NVIDIA_VISIBLE_DEVICES=7] exit $rc: $bad"
    check "cri NVIDIA_VISIBLE_DEVICES=7: the pod is refused and the CRI error names the GPU index" eval '[ $rc = 125 ] && grep -q "GPU index 7" <<<"$bad"'
    kill "$(cat "$c/containerd.pid")" 2>/dev/null
fi

# --- PyTorch: torch sees the GPU; bf16 matmul and LSTM step, bare metal and each engine,
# alternated.
declare -A bench_rows
if [ $torch_ok = 1 ]; then
    section "PyTorch"
    tpy=(/opt/torch/.venv/bin/python3 /nvc-gpu/workload.py)
    # The environment bare metal runs with, as far as it picks libraries.
    tenv=(-e HOME=/tmp -e PYTHONUNBUFFERED=1)
    [ -n "${LD_LIBRARY_PATH:-}" ] && tenv+=(-e "LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
    bare_info=$("$venv_py" tests/gpu/workload.py info 2>&1 | tail -1); echo "bare metal: $bare_info"
    engines_torch=()
    if [ $docker_up = 1 ]; then
        dtorch() { drun --runtime=nv -e NVIDIA_VISIBLE_DEVICES=all "${tenv[@]}" nvc-torch "${tpy[@]}" "$@"; }
        i=$(dtorch info | tail -1); echo "docker: $i"
        check "docker --runtime=nv: torch sees the GPU, with the host's name" grep -q "\"available\": true.*\"name\": \"$gpu_name\"" <<<"$i"
        engines_torch+=(docker)
    fi
    if [ $podman_up = 1 ]; then
        ptorch() { prun --device nvidia.com/gpu=all "${tenv[@]}" nvc-torch "${tpy[@]}" "$@"; }
        i=$(ptorch info | tail -1); echo "podman: $i"
        check "podman CDI: torch sees the GPU, with the host's name" grep -q "\"available\": true.*\"name\": \"$gpu_name\"" <<<"$i"
        engines_torch+=(podman)
    fi
    order=(bare "${engines_torch[@]}")
    for r in $(seq "$reps"); do
        # Every other repetition in the reverse order, so a drift weighs on each alike.
        if [ $((r % 2)) = 0 ]; then ord=(); for ((i = ${#order[@]} - 1; i >= 0; i--)); do ord+=("${order[i]}"); done
        else ord=("${order[@]}"); fi
        for where in "${ord[@]}"; do
            case $where in
                bare) o=$(PYTHONUNBUFFERED=1 "$venv_py" tests/gpu/workload.py bench 2>&1) ;;
                docker) o=$(dtorch bench) ;;
                podman) o=$(ptorch bench) ;;
            esac
            line=$(grep '^{' <<<"$o" | tail -1)
            echo "rep $r $where: ${line:-$o}"
            [ -n "$line" ] && echo "$where $line" >>"$work/bench"
        done
    done
fi

# --- Start time: `docker run --rm` of /bin/true, with and without nvc, alternated.
time_ms() { local a b; a=$(date +%s%N); "$@" >/dev/null 2>&1 || return 1; b=$(date +%s%N); echo $(((b - a) / 1000)); }
if [ $docker_up = 1 ]; then
    section "Docker start time"
    docker run --rm --network none nvc-gpu-test true >/dev/null 2>&1
    for _ in $(seq "$starts"); do
        t=$(time_ms docker run --rm --network none nvc-gpu-test true) && echo "docker|runc|$t" >>"$work/starts"
        t=$(time_ms docker run --rm --network none --runtime=nv nvc-gpu-test true) && echo "docker|--runtime=nv, no GPU|$t" >>"$work/starts"
        t=$(time_ms docker run --rm --network none --runtime=nv -e NVIDIA_VISIBLE_DEVICES=all nvc-gpu-test true) && echo "docker|--runtime=nv, all GPUs|$t" >>"$work/starts"
        t=$(time_ms docker run --rm --network none --gpus all nvc-gpu-test true) && echo "docker|--gpus all|$t" >>"$work/starts"
    done
fi
if [ $podman_up = 1 ]; then
    section "Podman start time"
    for _ in $(seq "$starts"); do
        t=$(time_ms podman run --rm --network none nvc-gpu-test true) && echo "podman|runc|$t" >>"$work/starts"
        t=$(time_ms podman run --rm --network none -e NVIDIA_VISIBLE_DEVICES=all nvc-gpu-test true) && echo "podman|hooks.d, all GPUs|$t" >>"$work/starts"
        t=$(time_ms podman run --rm --network none --device nvidia.com/gpu=all nvc-gpu-test true) && echo "podman|CDI, all GPUs|$t" >>"$work/starts"
    done
fi

[ -s "$work/starts" ] && check "every timed start succeeded ($(wc -l <"$work/starts") of $((starts * ($docker_up * 4 + $podman_up * 3))))" \
    test "$(wc -l <"$work/starts")" = $((starts * (docker_up * 4 + podman_up * 3)))

# --- The report.
section "report"
[ $docker_up = 1 ] && kill "$(cat "$d/dockerd.pid")" 2>/dev/null
cp "$c/containerd.log" "$out/" 2>/dev/null
python3 - "$results" "$work/bench" "$work/starts" "$md" "$starts" "$reps" <<PY
import json, os, statistics, sys
results, bench, starts, md, n_starts, n_reps = sys.argv[1:7]
lines = ["## Engines", "",
         "Generated by \`tests/gpu/engines.sh\` on the GPU machine; do not edit by hand.", "",
         "| | |", "| --- | --- |",
         "| gpu | $gpu_name |", "| driver | $driver |",
         "| Docker | $docker_v; containerd $containerd_v |",
         "| Podman | $podman_v |",
         "| CRI | $cri_v; client nvc-cri, handler nv |",
         "| runc | $(runc --version | head -1) |",
         "| nvc | $(cat "$carry/commit" 2>/dev/null) |", "",
         "| check | result |", "| --- | --- |"]
for l in open(results):
    r, name = l.rstrip("\n").split("|", 1)
    name = name.replace("|", "/")
    lines.append(f"| {name} | {r} |")
med = statistics.median
if os.path.exists(bench):
    rows = {}
    for l in open(bench):
        w, j = l.split(" ", 1)
        rows.setdefault(w, []).append(json.loads(j))
    lines += ["", "### PyTorch: container / bare metal", "",
              f"workload.py bench, {n_reps} repetitions alternated (bare metal and each engine, every other repetition in reverse order). " + next(iter(rows.values()))[0].get("method", ""), "",
              "| engine | metric | bare metal (median ms) | container (median ms) | ratio | within 2% |", "| --- | --- | --- | --- | --- | --- |"]
    for w in [w for w in rows if w != "bare"]:
        for k, label in (("matmul_ms", "bf16 matmul"), ("lstm_step_ms", "LSTM step")):
            b, c = med([x[k] for x in rows.get("bare", [])]), med([x[k] for x in rows[w]])
            ratio = c / b
            ok = abs(ratio - 1) <= 0.02
            lines.append(f"| {w} | {label} | {b:.3f} | {c:.3f} | {ratio:.4f} | {'PASS' if ok else 'FAIL'} |")
            print(f"{'PASS' if ok else 'FAIL'} {w}: {label} container/bare {ratio:.4f} (within 2%)")
            with open(results, "a") as f:
                f.write(f"{'PASS' if ok else 'FAIL'}|ratio {w} {label}\n")
    lines.append("\nThe repetitions' own medians, lowest to highest (how much a run varies by itself): " + "; ".join(
        f"{w}: matmul {min(x['matmul_ms'] for x in rows[w]):.3f}–{max(x['matmul_ms'] for x in rows[w]):.3f} ms, "
        f"LSTM step {min(x['lstm_step_ms'] for x in rows[w]):.2f}–{max(x['lstm_step_ms'] for x in rows[w]):.2f} ms" for w in rows) + ".")
    if "bare" in rows:
        lines.append(f"\nbf16 matmul: {med([x['matmul_tflops'] for x in rows['bare']]):.0f} TFLOP/s bare metal; " +
                     "; ".join(f"{med([x['matmul_tflops'] for x in rows[w]]):.0f} in {w}" for w in rows if w != "bare") + ".")
if os.path.exists(starts):
    t = {}
    for l in open(starts):
        e, how, us = l.rstrip("\n").split("|")
        t.setdefault((e, how), []).append(int(us) / 1000)
    lines += ["", "### Start time through the engines", "",
              f"\`docker run --rm\` / \`podman run --rm\` of \`true\` in the test image, {n_starts} runs each, alternated; start to exit as the user sees it.", "",
              "| engine | request | median ms | min | max | added vs runc (median) |", "| --- | --- | --- | --- | --- | --- |"]
    for (e, how), v in t.items():
        base = med(t.get((e, "runc"), [float("nan")]))
        lines.append(f"| {e} | {how} | {med(v):.0f} | {min(v):.0f} | {max(v):.0f} | {med(v) - base:+.0f} |")
        print(f"start {e} {how}: median {med(v):.0f} ms (n={len(v)}, min {min(v):.0f}, max {max(v):.0f})")
verdicts = [l.split("|", 1)[0] for l in open(results)]
summary = f"**{verdicts.count('PASS')} of {len(verdicts)} checks passed**" + (
    "." if "FAIL" not in verdicts else ": " + "; ".join(
        l.rstrip("\n").split("|", 1)[1] for l in open(results) if l.startswith("FAIL")) + " failed.")
at = lines.index("| check | result |")
lines[at:at] = [summary, ""]
open(md, "w").write("\n".join(lines) + "\n")
PY
grep -q '^FAIL' "$results" && fail=1
[ -n "${NVC_ENGINES_DOC:-}" ] && python3 tests/gpu/doc-section.py "$NVC_ENGINES_DOC" "$md"
cp "$d/dockerd.log" "$out/" 2>/dev/null
echo; echo "took $(($(date +%s) - t0)) s"
[ $fail = 0 ] && echo "ALL PASSED" || echo "SOME FAILED"
exit $fail
