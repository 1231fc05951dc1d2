#!/bin/sh
# Install the Debian packages flow needs to build (and, with --test, to test),
# only those that are missing. Idempotent; works as root or through sudo.
set -eu

# pkg-config name -> Debian package
BUILD="lua5.4:liblua5.4-dev libcjson:libcjson-dev libcurl:libcurl4-openssl-dev libcrypto:libssl-dev libmd:libmd-dev yaml-0.1:libyaml-dev readline:libreadline-dev expat:libexpat1-dev"

missing=""
command -v pkg-config >/dev/null 2>&1 || missing="pkg-config"
command -v cc >/dev/null 2>&1 || missing="$missing gcc libc6-dev"
command -v make >/dev/null 2>&1 || missing="$missing make"
for pair in $BUILD; do
    pc=${pair%%:*}; pkg=${pair#*:}
    if ! pkg-config --exists "$pc" 2>/dev/null; then missing="$missing $pkg"; fi
done
for extra in "$@"; do
    dpkg -s "$extra" >/dev/null 2>&1 || missing="$missing $extra"
done

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "deps: missing packages:$missing -- run as root or install sudo" >&2; exit 1
fi
echo "deps: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
