# Sourced by check.sh and host_cpu.sh: what both do to get files onto a device machine.
#
# bundle_libs DEST BINARY...: copies into DEST the shared
# libraries the binaries need, except the C and C++ runtimes, which the device machine's newer
# system has (a copy of an older glibc cannot be mixed with its loader).
bundle_libs() {
    local dest=$1 lib
    shift
    for lib in $(ldd "$@" | awk '/=>/ {print $3}' | sort -u); do
        case "$lib" in */libc.so*|*/libm.so*|*/libgcc_s*|*/libstdc++*|*/ld-linux*) ;; *) cp -L "$lib" "$dest/" ;; esac
    done
}

# The device machine takes 64 MiB of files a call and replaces the carried folder at the next call;
# /tmp stays while it is warm (30 s between calls). stage_carried DIR: copies the carried DIR there.
kvchat_stage=/tmp/kvchat-stage
stage_carried() {
    mkdir -p "$kvchat_stage" && cp -r "$1" "$kvchat_stage/" && ls -la "$kvchat_stage/$1"
}

# join_parts OUT SHA256_FILE PART...: a file carried in parts, put together and checked.
join_parts() {
    local out=$1 sum=$2
    shift 2
    cat "$@" > "$out"
    [ "$(sha256sum "$out" | cut -c1-64)" = "$(cat "$sum")" ] || { echo "the parts of $out do not add up" >&2; return 1; }
}
