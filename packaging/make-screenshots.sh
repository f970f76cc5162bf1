#!/usr/bin/env bash
# Makes the README's pictures again (docs/screenshots/*.png) from the running program: the
# screenshot suite's readmePictures case drives the window on the chat model (SmolLM2-135M-Instruct,
# greedy, so a rerun gives the same answers), then pngquant and optipng make each file small
# (each must stay under 150 KB). Run from anywhere after a build (packaging/kvchat.sh build) with
# the models installed (packaging/kvchat.sh model):
#   packaging/make-screenshots.sh
# Needs: pngquant, optipng (Debian packages; packaging/kvchat.sh deps installs them).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${KVCHAT_BUILD_DIR:-$ROOT/build}
OUT=$ROOT/docs/screenshots
LIMIT=$((150 * 1024))

for tool in pngquant optipng; do
  command -v $tool >/dev/null || { echo "make-screenshots.sh: $tool is missing (apt-get install $tool, or packaging/kvchat.sh deps)" >&2; exit 2; }
done
[ -d "$BUILD_DIR" ] || { echo "make-screenshots.sh: no build in $BUILD_DIR (packaging/kvchat.sh build)" >&2; exit 2; }
cmake --build "$BUILD_DIR" --target test_ui_screenshots

raw=$(mktemp -d /tmp/kvchat-screenshots.XXXXXX)
trap 'rm -rf "$raw"' EXIT
# The suite writes the full-size pictures; only what it made this run is copied.
(unset KVCHAT_MODEL; cd "$BUILD_DIR" &&
  QT_QPA_PLATFORM=offscreen KVCHAT_README_PICTURES="$raw" tests/test_ui_screenshots readmePictures)
mkdir -p "$OUT"
status=0
for png in "$raw"/*.png; do
  name=$(basename "$png")
  pngquant --quality=60-90 --strip --force --output "$OUT/$name" "$png"
  optipng -quiet -o2 "$OUT/$name"
  size=$(stat -c %s "$OUT/$name")
  printf '%-24s %6d KB\n' "$name" $((size / 1024))
  if [ "$size" -gt "$LIMIT" ]; then echo "  over 150 KB: make the picture smaller" >&2; status=1; fi
done
echo "in $OUT; open them and look before committing"
exit $status
