# Sourced by the GPU-machine scripts: installs the runc carried in $carry (runc and its
# libseccomp from Debian's packages, gathered by prepare.sh) as /usr/local/sbin/runc; the
# GPU machine has none of its own.
install -m 0755 "$carry/runc/usr/sbin/runc" /usr/local/sbin/runc
cp -a "$carry"/runc/usr/lib/x86_64-linux-gnu/libseccomp.so.2* /usr/local/lib/ && ldconfig
