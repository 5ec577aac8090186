# Sourced by the GPU-machine scripts: install_podman ARCHIVE DIR unpacks the Podman that
# tests/gpu/prepare.sh packs (podman, conmon and netavark in bin/, the libraries they load
# in lib/) into DIR, and installs those of its libraries this machine lacks under
# /usr/local/lib/nvc-engines, as tests/gpu/engines.sh installs the engines' own.
install_podman() {
    local archive=$1 dir=$2 lib name
    mkdir -p "$dir" && xz -dc "$archive" | tar -C "$dir" -xf - || return 1
    mkdir -p /usr/local/lib/nvc-engines
    for lib in "$dir"/lib/*.so*; do
        name=$(basename "$lib")
        ldconfig -p | grep -q "^[[:space:]]$name " || cp "$lib" /usr/local/lib/nvc-engines/
    done
    echo /usr/local/lib/nvc-engines >/etc/ld.so.conf.d/zz-nvc-engines.conf && ldconfig
}
