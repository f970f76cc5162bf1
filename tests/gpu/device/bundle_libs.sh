# Sourced by check.sh and host_cpu.sh. bundle_libs DEST BINARY...: copies into DEST the shared
# libraries the binaries need, except the C and C++ runtimes, which the device machine's newer
# system has (a copy of an older glibc cannot be mixed with its loader).
bundle_libs() {
    local dest=$1 lib
    shift
    for lib in $(ldd "$@" | awk '/=>/ {print $3}' | sort -u); do
        case "$lib" in */libc.so*|*/libm.so*|*/libgcc_s*|*/libstdc++*|*/ld-linux*) ;; *) cp -L "$lib" "$dest/" ;; esac
    done
}
