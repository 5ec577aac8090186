#!/usr/bin/env bash
# Where a CDI start's time goes under Podman, on the GPU machine's real driver: `podman run
# --rm` of /bin/true with no GPU, through nvc's hooks.d file, through nvc's CDI spec,
# through the same spec without its hooks (what the engine and runc cost alone for the
# spec's mounts and nodes), and through the spec with its files mounted on a tmpfs of its
# own at /.nvc and named in their folders by links (`staged`), alternated; then a few runs of each GPU configuration with
# nvc's log at debug level, whose `phases ms` lines say where each hook's time went.
# `true-createContainer` and `true-createRuntime` are the spec without nvc's hooks plus one
# `/bin/true` hook at that stage (what runc's running of a hook costs there, nvc aside);
# `cdi-no-poststop` is nvc's spec without its poststop hook; `cdi-nodes-only` the spec's
# device nodes alone (no mount, no hook: what Podman's CDI costs, mounts aside); `volumes`
# no CDI but the spec's mounts given to `podman run` as read-only volumes (what Podman and
# runc cost for those mounts, CDI aside).
# Needs what tests/gpu/prepare.sh packs into .device-carry/check (Podman, runc, nvc).
# Usage: tests/gpu/cdi-start.sh OUT_DIR [RUNS]
# Environment: CDI_START_CONFIGS (the configurations to alternate, default all of them);
# CDI_START_STORAGE=tmpfs puts Podman's storage on a tmpfs (less of the disk's noise).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: cdi-start.sh OUT_DIR [RUNS]}
runs=${2:-100}
mkdir -p "$out"
carry=$PWD/.device-carry
if [ -s "$carry/check/pack.tar.xz" ]; then
    rm -rf "$carry"/{bin,runc,poc,bench,prev,commit}
    xz -dc "$carry/check/pack.tar.xz" | tar -C "$carry" -xf - || { echo "FAIL unpack"; exit 1; }
    rm -f "$carry/check/pack.tar.xz"
fi
work=$(mktemp -d /tmp/nvc-cdi-start.XXXXXX)
# nvc's state and log on a tmpfs, as /run/nvc is.
rundir=$(mktemp -d /run/nvc-cdi-start.XXXXXX)
. tests/gpu/install-runc.sh
. tests/gpu/install-podman.sh
pd=$work/podman-bin
install_podman "$carry/check/podman.tar.xz" "$pd" || { echo "FAIL unpack Podman"; exit 1; }

cat >"$work/config.toml" <<TOML
[hook]
path = "$carry/bin/nvc-hook"
state-dir = "$rundir/state"
[log]
file = "$rundir/nvc.log"
level = "info"
TOML
export NVC_CONFIG=$work/config.toml
mkdir -p "$work"/{root,runroot,tmp,hooks.d,none}
if [ "${CDI_START_STORAGE:-disk}" = tmpfs ]; then
    mount -t tmpfs -o size=2g nvc-cdi-start "$work/root" || { echo "FAIL tmpfs for Podman's storage"; exit 1; }
fi
"$carry/bin/nvc" runtime configure --runtime podman --config "$work/hooks.d/oci-nvc-hook.json" \
    --hook-path "$carry/bin/nvc-hook" >/dev/null
python3 - "$work/hooks.d/oci-nvc-hook.json" "$NVC_CONFIG" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["hook"].setdefault("env", []).append("NVC_CONFIG=" + sys.argv[2])
json.dump(j, open(sys.argv[1], "w"))
PY
# The specs, under kinds of this script's own (the host's nvidia.com/gpu specs, if any,
# take no part), in /etc/cdi, which every Podman reads. Podman reads and checks every spec
# there on each start: a configuration's spec is put there for its own runs only (`run`).
mkdir -p /etc/cdi "$work/specs"
s=$work/specs
a=$s/nvc-start-a.json b=$s/nvc-start-b.json c=$s/nvc-start-c.json
e=$s/nvc-start-e.json f=$s/nvc-start-f.json
g=$s/nvc-start-g.json h=$s/nvc-start-h.json i=$s/nvc-start-i.json
j=$s/nvc-start-j.json
trap 'rm -f /etc/cdi/nvc-start-?.json' EXIT
"$carry/bin/nvc" cdi generate --vendor a.start.example --output "$a" || { echo "FAIL nvc cdi generate"; exit 1; }
python3 - "$a" "$b" "$c" "$e" "$f" "$g" "$h" "$i" "$j" "$work/volumes" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
x = json.loads(json.dumps(s))
x["kind"] = "j.start.example/gpu"
x["containerEdits"].pop("hooks", None)
x["containerEdits"].pop("mounts", None)
json.dump(x, open(sys.argv[9], "w"))
with open(sys.argv[10], "w") as out:
    for m in s["containerEdits"].get("mounts", []):
        if m.get("type", "bind") == "bind" or "bind" in m.get("options", []):
            out.write("-v\n%s:%s:ro\n" % (m["hostPath"], m["containerPath"]))
# g and h: no nvc hook, one /bin/true at createContainer (g) or createRuntime (h);
# i: nvc's spec without its poststop hook.
for path, kind, stage in ((sys.argv[6], "g", "createContainer"), (sys.argv[7], "h", "createRuntime")):
    x = json.loads(json.dumps(s))
    x["kind"] = kind + ".start.example/gpu"
    x["containerEdits"]["hooks"] = [{"hookName": stage, "path": "/bin/true", "args": ["true"]}]
    json.dump(x, open(path, "w"))
x = json.loads(json.dumps(s))
x["kind"] = "i.start.example/gpu"
x["containerEdits"]["hooks"] = [h for h in x["containerEdits"]["hooks"] if h.get("hookName") != "poststop"]
json.dump(x, open(sys.argv[8], "w"))
# e and f: the hook without the /proc mask, at createContainer (e) and at createRuntime (f),
# where the runtime's own process runs it instead of the container's init: what the
# stage costs. (At createRuntime the hook works on the host's view of the rootfs, which
# lacks the runtime's mounts: a timing, not a working container.)
for path, kind, stage in ((sys.argv[4], "e", "createContainer"), (sys.argv[5], "f", "createRuntime")):
    x = json.loads(json.dumps(s))
    x["kind"] = kind + ".start.example/gpu"
    hook = x["containerEdits"]["hooks"][0]
    at = hook["args"].index("--proc-root")
    hook["args"] = hook["args"][:at] + hook["args"][at + 2:]
    hook["hookName"] = stage
    json.dump(x, open(path, "w"))
# c: the library and program files mounted under one tmpfs at /.nvc, as the prestart hook
# stages them under /dev/.nvc (the folder's FNV-1a hash), linked from where they belong.
c = json.loads(json.dumps(s))
c["kind"] = "c.start.example/gpu"
def fnv(data):
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h
links, mounts = [], [{"hostPath": "tmpfs", "containerPath": "/.nvc", "type": "tmpfs",
                      "options": ["nosuid", "nodev", "noexec", "mode=755", "size=64k"]}]
for m in c["containerEdits"]["mounts"]:
    path = m["containerPath"]
    if path.startswith(("/usr/", "/lib", "/etc/")) and "/firmware/" not in path:
        staged = "/.nvc/%08x/%s" % (fnv(os.path.dirname(path).encode()), os.path.basename(path))
        links += ["--link", staged + "::" + path]
        m = dict(m, containerPath=staged)
    mounts.append(m)
c["containerEdits"]["mounts"] = mounts
hook = c["containerEdits"]["hooks"][0]
at = hook["args"].index("cdi-setup") + 1
hook["args"] = hook["args"][:at] + links + hook["args"][at:]
c["cdiVersion"] = "0.5.0"
json.dump(c, open(sys.argv[3], "w"))
edits = s["containerEdits"]
print("spec: %d mounts, %d device nodes, hooks %s" % (len(edits.get("mounts", [])),
      len(edits.get("deviceNodes", [])) + sum(len(d["containerEdits"].get("deviceNodes", [])) for d in s["devices"] if d["name"] == "all"),
      [(h.get("hookName"), h["args"][1]) for h in edits.get("hooks", [])]))
s["kind"] = "b.start.example/gpu"
edits.pop("hooks", None)
json.dump(s, open(sys.argv[2], "w"))
PY

P=("$pd/bin/podman" --root "$work/root" --runroot "$work/runroot" --tmpdir "$work/tmp"
    --storage-driver overlay --cgroup-manager cgroupfs --events-backend file
    --runtime /usr/local/sbin/runc --conmon "$pd/bin/conmon")
export CONTAINERS_CONF=$work/containers.conf
printf '[containers]\nlog_driver = "k8s-file"\n[engine]\nevents_logger = "file"\nhelper_binaries_dir = ["%s"]\n' "$pd/bin" >"$CONTAINERS_CONF"
echo '{"default":[{"type":"insecureAcceptAnything"}]}' >"$work/policy.json"
tar -C "$carry/bench/rootfs" -cf "$work/image.tar" . &&
    "${P[@]}" import --signature-policy "$work/policy.json" "$work/image.tar" localhost/nvc-start:latest >/dev/null ||
    { echo "FAIL podman import"; exit 1; }
echo "$("${P[@]}" version --format 'Podman {{.Client.Version}}'), $(/usr/local/sbin/runc --version | head -1)"

run() { # run NAME HOOKS-DIR PODMAN-RUN-ARGS...: one timed `podman run --rm`, in µs
    local name=$1 hooks=$2; shift 2
    local t0 t1 arg spec=
    for arg; do
        case $arg in ?.start.example/gpu=all) spec=nvc-start-${arg%%.*}.json ;; esac
    done
    [ -z "$spec" ] || [ ! -e "$work/specs/$spec" ] || cp "$work/specs/$spec" /etc/cdi/
    t0=$(date +%s%N)
    "${P[@]}" --hooks-dir "$work/$hooks" run --rm --network none --ulimit nofile=1024:1024 \
        --ulimit nproc=1024:1024 "$@" localhost/nvc-start:latest /bin/true ||
        echo "FAIL $name" >&2
    t1=$(date +%s%N)
    [ -z "$spec" ] || [ ! -e "$work/specs/$spec" ] || rm -f "/etc/cdi/$spec"
    echo "$name $(((t1 - t0) / 1000))" >>"$work/times"
}
one() { # one CONFIGURATION: one run of it
    case $1 in
    plain) run plain none ;;
    hooks.d) run hooks.d hooks.d -e NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=all ;;
    cdi) run cdi none --device a.start.example/gpu=all ;;
    cdi-no-hooks) run cdi-no-hooks none --device b.start.example/gpu=all ;;
    cdi-staged) run cdi-staged none --device c.start.example/gpu=all ;;
    cdi-no-mask) run cdi-no-mask none --device e.start.example/gpu=all ;;
    cdi-no-mask-createRuntime) run cdi-no-mask-createRuntime none --device f.start.example/gpu=all ;;
    true-createContainer) run true-createContainer none --device g.start.example/gpu=all ;;
    true-createRuntime) run true-createRuntime none --device h.start.example/gpu=all ;;
    cdi-no-poststop) run cdi-no-poststop none --device i.start.example/gpu=all ;;
    cdi-nodes-only) run cdi-nodes-only none --device j.start.example/gpu=all ;;
    volumes) run volumes none "${volumes[@]}" ;;
    *) echo "FAIL no configuration $1" >&2; exit 2 ;;
    esac
}
mapfile -t volumes <"$work/volumes"
configs=${CDI_START_CONFIGS:-plain hooks.d cdi cdi-no-hooks cdi-staged cdi-no-mask cdi-no-mask-createRuntime true-createContainer true-createRuntime cdi-no-poststop cdi-nodes-only volumes}
all() { # one run of each configuration
    local c
    for c in $configs; do one "$c"; done
}
all && all && rm -f "$work/times"
for _ in $(seq "$runs"); do all; done
python3 - "$work/times" <<'PY' | tee "$out/cdi-start.txt"
import collections, statistics, sys
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    name, us = line.split()
    d[name].append(int(us) / 1000)
base = statistics.median(d["plain"])
print("configuration   runs  median ms  p25     p75     mean    added (median)")
for name, v in d.items():
    q = statistics.quantiles(v, n=4)
    print(f"{name:14} {len(v):5}  {statistics.median(v):8.2f}  {q[0]:6.2f}  {q[2]:6.2f}  "
          f"{statistics.mean(v):6.2f}  {statistics.median(v) - base:+7.2f}")
PY
# The hooks' phases, at debug level (which costs time: not for the table above).
sed -i 's/level = "info"/level = "debug"/' "$NVC_CONFIG"
: >"$rundir/nvc.log"
for _ in 1 2 3 4 5 6; do
    run hooks.d hooks.d -e NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=all
    run cdi none --device a.start.example/gpu=all
    run cdi-staged none --device c.start.example/gpu=all
done
grep "phases ms" "$rundir/nvc.log" | tee "$out/phases.txt"
# What each container's poststop took away (Podman runs the hooks.d file's itself).
grep "ended:" "$rundir/nvc.log" | tee "$out/ended.txt" | sed 's/^[0-9.]* //' | sort | uniq -c
# The staged container sees the driver as the other: its libraries by soname.
cp "$c" /etc/cdi/
"${P[@]}" --hooks-dir "$work/none" run --rm --network none --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
    --device c.start.example/gpu=all localhost/nvc-start:latest sh -c \
    'ls -l /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/bin/nvidia-smi; /usr/bin/nvidia-smi -L'
# With the strace that tests/gpu/prepare.sh gathers (carried as .device-carry/strace):
# the hooks' system calls, through a wrapper named in a copy of each configuration.
if [ -x "$carry/strace/strace" ]; then
    wrapper=$rundir/nvc-hook
    printf '#!/bin/sh\nexec env LD_LIBRARY_PATH=%s %s -E LD_LIBRARY_PATH -f -ff -T -o %s -- %s "$@"\n' \
        "$carry/strace/lib" "$carry/strace/strace" "$rundir/t" "$carry/bin/nvc-hook" >"$wrapper"
    chmod 755 "$wrapper"
    # Two files, so that the poststop runs as `nvc-hook poststop` and is told apart.
    mkdir -p "$work/hooks.d-strace"
    python3 - "$work/hooks.d/oci-nvc-hook.json" "$work/hooks.d-strace" "$wrapper" <<'PY'
import json, sys
hook = json.load(open(sys.argv[1]))
hook["hook"]["path"] = sys.argv[3]
for stage in ("prestart", "poststop"):
    one = json.loads(json.dumps(hook))
    one["stages"] = [stage]
    one["hook"]["args"] = ["nvc-hook", stage]
    json.dump(one, open("%s/oci-nvc-hook-%s.json" % (sys.argv[2], stage), "w"))
PY
    d=/etc/cdi/nvc-start-d.json
    sed "s|$carry/bin/nvc-hook|$wrapper|g; s|a.start.example|d.start.example|" "$a" >"$d"
    sed -i 's/level = "debug"/level = "info"/' "$NVC_CONFIG"
    for _ in 1 2 3 4 5; do
        run hooks.d hooks.d-strace -e NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_DRIVER_CAPABILITIES=all
        run cdi none --device d.start.example/gpu=all
    done
    rm -f "$d"
    python3 tests/gpu/strace-summary.py "$rundir/t" 25 | tee "$out/strace.txt"
fi
[ "${CDI_START_STORAGE:-disk}" = tmpfs ] && { "${P[@]}" rm -af >/dev/null 2>&1; umount -l "$work/root"; }
rm -rf "$rundir"
exit 0
